package gpu

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(removeModelBin{m}) }

// removeModelBin runs the tests, then removes the scripted backend scriptedModel built
// (its temporary directory would otherwise outlive every run).
type removeModelBin struct{ m *testing.M }

func (r removeModelBin) Run() int {
	code := r.m.Run()
	if modelBinDir != "" {
		_ = os.RemoveAll(modelBinDir)
	}
	return code
}
