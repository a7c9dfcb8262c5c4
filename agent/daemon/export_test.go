package daemon

import (
	"context"

	"privateassistant/ops"
)

// JobState is jobState, for the external tests.
var JobState = jobState

// StopGateway stops the agent's gateway listener (a readiness test); RestartGateway
// serves it again on the same address.
func StopGateway(a *Agent) { a.gwSrv.Stop() }

func RestartGateway(a *Agent) error {
	a.gwSrv = &ops.HTTPServer{Addr: a.gwBound, Handler: a.Gateway, Log: a.Log, What: "gateway"}
	return a.gwSrv.Start(context.Background())
}

// StopQueue shuts down the asynq server consuming queue q.
func StopQueue(a *Agent, q string) {
	for _, qs := range a.queueServers() {
		if qs.name == q {
			qs.Stop()
		}
	}
}
