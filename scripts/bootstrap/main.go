// Command bootstrap creates the initial harness profiles, model routes and settings
// (revision 1 of each) from a reviewed file. It is an explicit operator act: it refuses
// when settings already exist, and nothing runs it automatically.
//
//	go run ./scripts/bootstrap deploy/bootstrap.json
//
// Settings: APPWRITE_ENDPOINT, APPWRITE_PROJECT_ID, APPWRITE_API_KEY (documents.read and
// documents.write), APPWRITE_DATABASE_ID — from the environment, then .env.
package main

import (
	"context"
	"fmt"
	"os"
	"os/user"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/kelseyhightower/envconfig"

	"privateassistant/internal/dotenv"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

type settings struct {
	Endpoint   string `envconfig:"APPWRITE_ENDPOINT" required:"true"`
	ProjectID  string `envconfig:"APPWRITE_PROJECT_ID" required:"true"`
	APIKey     string `envconfig:"APPWRITE_API_KEY" required:"true"`
	DatabaseID string `envconfig:"APPWRITE_DATABASE_ID" default:"privateassistant"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: bootstrap <reviewed-bootstrap.json>")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "bootstrap:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	if err := dotenv.Load(".env"); err != nil {
		return err
	}
	var s settings
	if err := envconfig.Process("", &s); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	f, err := runconfig.ParseBootstrap(b)
	if err != nil {
		return err
	}
	c := appwrite.NewClient(appwrite.WithEndpoint(s.Endpoint), appwrite.WithProject(s.ProjectID), appwrite.WithKey(s.APIKey))
	actor := "operator"
	if u, err := user.Current(); err == nil {
		actor = "operator:" + u.Username
	}
	if len(actor) > 36 {
		actor = actor[:36]
	}
	if err := runconfig.Bootstrap(context.Background(), schema.NewStore(c, schema.Definition(s.DatabaseID)), f, actor); err != nil {
		return err
	}
	fmt.Printf("bootstrapped %d harness profiles, %d model routes, %d roles (settings revision 1)\n", len(f.Harnesses), len(f.Routes), len(f.Roles))
	return nil
}
