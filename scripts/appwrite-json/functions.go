package main

import "privateassistant/schema/appwritejson"

// functions lists the deployed Appwrite Functions. Each path points at the bundle that
// `make package` writes (DESIGN.md §2, "Deploying a Go function").
func functions() []appwritejson.Function {
	return nil
}
