// Package handler is the "responses" Appwrite Function: the runtime API for host apps.
// Main only adapts the Open Runtimes request to the shared HTTP handler
// (functions/service) and back.
package handler

import (
	"github.com/open-runtimes/types-for-go/v4/openruntimes"

	"privateassistant/functions/runtimehttp"
	"privateassistant/functions/service"
)

var lazy = &service.Lazy{Function: "responses"}

// Main is the function's entry point.
func Main(Context openruntimes.Context) openruntimes.Response {
	return runtimehttp.Serve(&Context, lazy.Handler(), runtimehttp.ExecutionBudget)
}

// Close releases the warm container's clients (the local function host and tests call it;
// in Appwrite the container simply ends).
func Close() error { return lazy.Close() }
