package backup

import (
	"testing"

	"go.uber.org/goleak"
)

// Restore writes on worker goroutines; the rehearsal runs an asynq server.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
