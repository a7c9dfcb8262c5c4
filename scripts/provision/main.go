// Command provision plans or applies the Appwrite schema (make appwrite-plan / apply).
//
//	provision plan    # print what would be created, and any drift; writes nothing
//	provision apply   # create what is missing; refuses on drift; safe to re-run
//
// Settings come from the environment, then .env (see .env.example): APPWRITE_ENDPOINT,
// APPWRITE_PROJECT_ID, APPWRITE_BOOTSTRAP_KEY, APPWRITE_DATABASE_ID.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/kelseyhightower/envconfig"

	"privateassistant/internal/dotenv"
	"privateassistant/schema"
	"privateassistant/schema/provision"
)

type settings struct {
	Endpoint     string        `envconfig:"APPWRITE_ENDPOINT" required:"true"`
	ProjectID    string        `envconfig:"APPWRITE_PROJECT_ID" required:"true"`
	BootstrapKey string        `envconfig:"APPWRITE_BOOTSTRAP_KEY" required:"true"`
	DatabaseID   string        `envconfig:"APPWRITE_DATABASE_ID" default:"privateassistant"`
	WaitTimeout  time.Duration `envconfig:"APPWRITE_PROVISION_WAIT" default:"2m"`
}

func main() {
	if len(os.Args) != 2 || (os.Args[1] != "plan" && os.Args[1] != "apply") {
		fmt.Fprintln(os.Stderr, "usage: provision plan|apply")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "provision:", err)
		os.Exit(1)
	}
}

func run(mode string) error {
	if err := dotenv.Load(".env"); err != nil {
		return err
	}
	var s settings
	if err := envconfig.Process("", &s); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := provision.Config{Endpoint: s.Endpoint, ProjectID: s.ProjectID, APIKey: s.BootstrapKey,
		WaitTimeout: s.WaitTimeout, Progress: os.Stdout}
	m := schema.Definition(s.DatabaseID)
	fmt.Printf("target: %s project %s database %s\n", s.Endpoint, s.ProjectID, m.DatabaseID)
	var plan provision.Diff
	var err error
	if mode == "plan" {
		plan, err = provision.Compare(ctx, cfg, m)
	} else {
		plan, err = provision.Apply(ctx, cfg, m)
	}
	printPlan(plan)
	return err
}

func printPlan(p provision.Diff) {
	for _, d := range p.Drift {
		fmt.Println("DRIFT  ", d)
	}
	for _, a := range p.Actions {
		fmt.Println("PLAN   ", a)
	}
	if p.Clean() {
		fmt.Println("schema matches; nothing to do")
	}
}
