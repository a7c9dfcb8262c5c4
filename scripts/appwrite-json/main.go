// Command appwrite-json writes appwrite.json at the repository root from the data model
// (schema.Definition) and the function registry. A test fails when the committed file
// differs from what this command would write.
//
//	go run ./scripts/appwrite-json          # write appwrite.json
//	go run ./scripts/appwrite-json -check   # exit 1 when it is out of date
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"privateassistant/schema"
	"privateassistant/schema/appwritejson"
)

// ProjectID is the Appwrite project this repository deploys to by default; operators
// using another id pass --project-id to the CLI or edit their copy.
const ProjectID = "privateassistant"

func project() appwritejson.Project {
	return appwritejson.Project{ProjectID: ProjectID, ProjectName: "Private Assistant", Functions: functions()}
}

func generate() ([]byte, error) {
	return appwritejson.Generate(schema.Definition(""), project())
}

func main() {
	check := flag.Bool("check", false, "only compare with the committed file")
	out := flag.String("o", "appwrite.json", "output path")
	flag.Parse()
	b, err := generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "appwrite-json:", err)
		os.Exit(1)
	}
	if *check {
		cur, _ := os.ReadFile(*out)
		if !bytes.Equal(cur, b) {
			fmt.Fprintln(os.Stderr, "appwrite-json: appwrite.json is out of date; run `make appwrite-json`")
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "appwrite-json:", err)
		os.Exit(1)
	}
}
