package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/internal/startstop"
	"privateassistant/schema"
)

// Upload sweep defaults (PA_AGENT_UPLOAD_AGE, PA_AGENT_UPLOAD_SWEEP_EVERY).
const (
	DefaultUploadAge        = 24 * time.Hour
	DefaultUploadSweepEvery = time.Hour
)

// UploadSweeper deletes the files of the uploads bucket that no message names once they
// are older than Age: a file the web uploads when it is attached, whose message was never
// sent (the tab closed before Send, the chip removed while the delete failed). A file a
// message names is deleted with that message (schema.Table.Delete), never here.
//
// Each sweep lists the bucket in creation order up to the first file younger than Age and,
// for each older one, asks for one message of the file's uploader (the user its read
// permission names) whose attachments contain it. Several agents may sweep at once: a
// file already deleted is not an error. Admission accepts only files that exist when it
// checks them, so a message sent more than Age after its file was uploaded may find the
// file swept (409-free: admission answers 404 attachment_not_found and the user attaches
// it again); the window where a sweep deletes a file between admission's check and its
// message write needs a draft older than Age sent at that instant. A
// startstop.Service: Start sweeps at once and every Every, Stop waits.
type UploadSweeper struct {
	Store *schema.Store
	Age   time.Duration // default DefaultUploadAge
	Every time.Duration // default DefaultUploadSweepEvery
	Log   *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	run startstop.Runner
}

var _ startstop.Service = (*UploadSweeper)(nil)

func (u *UploadSweeper) log() *slog.Logger {
	if u.Log == nil {
		return slog.Default()
	}
	return u.Log
}

// UploadSweep is what one sweep did.
type UploadSweep struct {
	Checked int // files older than Age
	Deleted int // of them, named by no message
}

// Once runs one sweep. An Appwrite error ends it; the next one goes on.
func (u *UploadSweeper) Once(ctx context.Context) (UploadSweep, error) {
	var sw UploadSweep
	now := time.Now
	if u.Now != nil {
		now = u.Now
	}
	age := u.Age
	if age <= 0 {
		age = DefaultUploadAge
	}
	before := now().Add(-age)
	msgs := schema.For[schema.Message](u.Store, schema.CollMessages)
	cursor := ""
	for {
		files, next, err := u.Store.UploadsCreatedBefore(ctx, before, cursor, 100)
		if err != nil {
			return sw, fmt.Errorf("upload sweep: %w", err)
		}
		for _, f := range files {
			sw.Checked++
			q := schema.ListQuery{Owner: f.Owner, Filters: []string{query.Contains("attachments", f.ID)}, Limit: 1}
			if f.Owner == "" {
				q.AllOwners = true // a file no user can read: only a server wrote it
			}
			page, err := msgs.List(ctx, q)
			if err != nil {
				return sw, fmt.Errorf("upload sweep: messages naming %s: %w", f.ID, err)
			}
			if len(page.Items) > 0 {
				continue
			}
			if err := u.Store.DeleteUpload(ctx, f.ID); err != nil {
				return sw, fmt.Errorf("upload sweep: %w", err)
			}
			sw.Deleted++
		}
		if next == "" {
			return sw, nil
		}
		cursor = next
	}
}

// Start sweeps at once and then every Every in the background, until Stop.
func (u *UploadSweeper) Start(ctx context.Context) error {
	every := u.Every
	if every <= 0 {
		every = DefaultUploadSweepEvery
	}
	return u.run.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, every, u.log(), "upload sweep", func(ctx context.Context) error {
			sw, err := u.Once(ctx)
			if sw.Deleted > 0 {
				u.log().Info("upload sweep: unsent uploads deleted", "deleted", sw.Deleted, "checked", sw.Checked)
			}
			return err
		})
	})
}

// Stop ends the sweeps and waits for the one in progress. Idempotent, safe before Start.
func (u *UploadSweeper) Stop() { u.run.Stop() }
