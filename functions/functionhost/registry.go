package functionhost

import (
	"errors"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"

	admin "privateassistant/functions/admin"
	artifacts "privateassistant/functions/artifacts"
	conversations "privateassistant/functions/conversations"
	responses "privateassistant/functions/responses"
	runs "privateassistant/functions/runs"
	"privateassistant/functions/service"
	system "privateassistant/functions/system"
)

// Mains maps each function name to its entry point.
var Mains = map[string]func(openruntimes.Context) openruntimes.Response{
	"conversations": conversations.Main,
	"runs":          runs.Main,
	"artifacts":     artifacts.Main,
	"system":        system.Main,
	"admin":         admin.Main,
	"responses":     responses.Main,
}

// Deployed returns every function of service.Functions with its Main and the key the
// host hands each execution (keyFor returns it by function name).
func Deployed(keyFor func(name string) string) []Function {
	out := []Function{}
	for _, f := range service.Functions {
		out = append(out, Function{Name: f.Name, Prefixes: f.Prefixes, Main: Mains[f.Name], Key: keyFor(f.Name)})
	}
	return out
}

// CloseDeployed releases the clients the real Mains built for their warm containers.
func CloseDeployed() error {
	return errors.Join(conversations.Close(), runs.Close(), artifacts.Close(), system.Close(), admin.Close(), responses.Close())
}
