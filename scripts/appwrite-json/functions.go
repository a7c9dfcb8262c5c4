package main

import (
	"privateassistant/functions/service"
	"privateassistant/schema/appwritejson"
)

// functions lists the deployed Appwrite Functions. Each path points at the bundle that
// `make package` writes (docs/design/layout.md, "Deploying a Go function"). Execution is open to
// "any" because function domains require it; every endpoint authenticates the caller
// itself from a verified JWT. Scopes are each function's least privilege; secrets
// (PA_REDIS_PASSWORD, ...) are set as project variables in the Console, never here.
func functions() []appwritejson.Function {
	var out []appwritejson.Function
	for _, f := range service.Functions {
		out = append(out, appwritejson.Function{
			ID: f.Name, Name: f.Name, Runtime: "go-1.26", Path: "build/functions/" + f.Name,
			Entrypoint: "main.go", Commands: "", Execute: []string{"any"}, Events: []string{},
			Scopes: f.Scopes, Schedule: f.Schedule, Timeout: 30, Enabled: true, Logging: true,
			BuildSpecification: "s-1vcpu-512mb", RuntimeSpecification: "s-1vcpu-512mb",
		})
	}
	return out
}
