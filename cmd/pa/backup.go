package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/client"
	"github.com/appwrite/sdk-for-go/functions"

	"privateassistant/backup"
	fnservice "privateassistant/functions/service"
	"privateassistant/keyref"
	"privateassistant/release"
	"privateassistant/schema"
)

// The backup, restore, release and rollback commands talk to Appwrite directly with a
// server key named by a key reference (-key-ref env:NAME or file:/path; the key itself is
// never a flag, never printed and never written to an archive or manifest).

// serverClient is an SDK client for APPWRITE_ENDPOINT/APPWRITE_PROJECT_ID with the key ref names.
func (c *cli) serverClient(ref string) (client.Client, error) {
	key, err := keyref.Resolve(ref)
	if err != nil {
		return client.Client{}, fail(exitUsage, "the server key: %v (set -key-ref)", err)
	}
	if key == "" {
		return client.Client{}, fail(exitUsage, "a server key reference is required (-key-ref env:NAME or file:/path)")
	}
	cl := appwrite.NewClient(appwrite.WithEndpoint(c.endpoint), appwrite.WithProject(c.project), appwrite.WithKey(key))
	cl.Client = &http.Client{Timeout: 5 * time.Minute} // a 20 MiB artifact on a slow link
	return cl, nil
}

func dataModel() schema.Model { return schema.Definition(os.Getenv("APPWRITE_DATABASE_ID")) }

// buildVersion is this binary's version: the module version, else the VCS revision.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

func keyRefFlag(fs *flag.FlagSet, def string) *string {
	return fs.String("key-ref", def, "where the server key is kept: env:NAME or file:/path (never the key)")
}

var backupCommand = &command{name: "backup", args: "ARCHIVE", min: 1, max: 1, summary: "write one archive of the project's data",
	help: "Writes every record of every collection (with its permissions) and every file of the bucket, with a manifest\n" +
		"(versions, counts, SHA-256 of every entry), to the tar file ARCHIVE (mode 0600). Run again after an interruption,\n" +
		"it resumes from ARCHIVE.partial. Redis is not backed up (the outbox rebuilds the queue).\n" +
		"Settings: APPWRITE_ENDPOINT, APPWRITE_PROJECT_ID, APPWRITE_DATABASE_ID; the key needs documents.read, files.read.",
	setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
		ref := keyRefFlag(fs, "env:APPWRITE_API_KEY")
		return func(ctx context.Context, a []string) error {
			cl, err := c.serverClient(*ref)
			if err != nil {
				return err
			}
			res, err := backup.Backup(ctx, backup.Options{Client: cl, Model: dataModel(), KeyRef: keyref.Parse(*ref).String(),
				AppVersion: buildVersion(), Progress: c.errw}, a[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "%s\tformat %d\tschema %s\t%d documents\t%d files\t%d file bytes\n", res.Path, res.Manifest.Format,
				res.Manifest.Schema.Version, sum(res.Manifest.Counts.Documents), res.Manifest.Counts.Files, res.Manifest.Counts.FileBytes)
			return nil
		}
	}}

var restoreCommand = &command{name: "restore", args: "ARCHIVE", min: 1, max: 1, summary: "restore an archive into an empty project",
	help: "Restores ARCHIVE into the provisioned, empty project (make appwrite-apply first; stop the agents): ids,\n" +
		"permissions and timestamps kept, then every record and byte verified. Re-run it to complete a partial restore.\n" +
		"Queued runs are given one task each by the outbox; runs that were in progress come back interrupted and\n" +
		"never run again. Prints the plan; restores only with -yes. The key needs documents.read/write, files.read/write.",
	setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
		ref, yes := keyRefFlag(fs, "env:APPWRITE_API_KEY"), yesFlag(fs)
		return func(ctx context.Context, a []string) error {
			m, err := backup.ReadManifest(a[0])
			if err != nil {
				return err
			}
			if !*yes {
				fmt.Fprintf(c.errw, "plan (commit with -yes): restore %s (format %d, application %s, schema %s, taken %s from project %s)\n"+
					"  into project %s at %s: %d documents, %d files (%d bytes)\n", a[0], m.Format, m.ApplicationVersion, m.Schema.Version,
					m.CreatedAt, m.Project, c.project, c.endpoint, sum(m.Counts.Documents), m.Counts.Files, m.Counts.FileBytes)
				return nil
			}
			cl, err := c.serverClient(*ref)
			if err != nil {
				return err
			}
			rep, err := backup.Restore(ctx, backup.Options{Client: cl, Model: dataModel(), KeyRef: *ref, Progress: c.errw}, a[0])
			if errors.Is(err, backup.ErrNotEmpty) {
				return fail(exitConflict, "%v", err)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "restored and verified\t%d documents\t%d files\t%d interrupted\t%d cancelled\t%d queued\n",
				sum(m.Counts.Documents), m.Counts.Files, len(rep.Interrupted), len(rep.Cancelled), len(rep.Queued))
			return nil
		}
	}}

func releaseDir(fs *flag.FlagSet) *string {
	def := os.Getenv("PA_RELEASE_DIR")
	if def == "" {
		def = "deploy/releases"
	}
	return fs.String("dir", def, "the `directory` of release manifests (PA_RELEASE_DIR)")
}

func functionIDs() []string {
	ids := make([]string, 0, len(fnservice.Functions))
	for _, f := range fnservice.Functions {
		ids = append(ids, f.Name)
	}
	return ids
}

var releaseCommand = &command{name: "release", min: 0, max: 0, summary: "record the release now in place",
	help: "Writes a release manifest: each function's active deployment id, the agent build version and the schema\n" +
		"version, into the release directory (make release runs it after the functions are deployed). The key needs\n" +
		"functions.read.",
	setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
		ref, dir := keyRefFlag(fs, "env:APPWRITE_DEPLOY_KEY"), releaseDir(fs)
		agent := fs.String("agent-version", "", "the agent build `version` installed under /opt/privateassistant/releases (required)")
		return func(ctx context.Context, _ []string) error {
			if *agent == "" {
				return fail(exitUsage, "admin release: -agent-version is required")
			}
			cl, err := c.serverClient(*ref)
			if err != nil {
				return err
			}
			m, err := release.Record(functions.New(cl), functionIDs(), *agent, backup.Schema(dataModel()), *dir, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "release %s\t%s/%s\tschema %s\n", m.Version, *dir, m.File, m.Schema.Version)
			for _, id := range functionIDs() {
				fmt.Fprintf(c.out, "  function %s\tdeployment %s\n", id, m.Functions[id])
			}
			return nil
		}
	}}

var rollbackCommand = &command{name: "rollback", min: 0, max: 0, summary: "activate the previous release's functions",
	help: "Finds the release whose function deployments are active and activates the previous release's (or -to's)\n" +
		"through Appwrite's Functions API, then prints the agent's step. Never changes the schema. Prints the plan;\n" +
		"activates only with -yes. The key needs functions.read and functions.write.",
	setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
		ref, dir, yes := keyRefFlag(fs, "env:APPWRITE_DEPLOY_KEY"), releaseDir(fs), yesFlag(fs)
		to := fs.String("to", "", "the release `version` (or manifest file) to activate (default: the one before the active one)")
		return func(ctx context.Context, _ []string) error {
			cl, err := c.serverClient(*ref)
			if err != nil {
				return err
			}
			fn := functions.New(cl)
			releases, err := release.List(*dir)
			if err != nil {
				return err
			}
			plan, err := release.Choose(fn, releases, *to)
			if err != nil {
				return err
			}
			if !*yes {
				fmt.Fprintln(c.errw, "plan (commit with -yes):")
			}
			return release.Rollback(fn, plan, backup.Schema(dataModel()), c.out, !*yes)
		}
	}}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
