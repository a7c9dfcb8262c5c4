package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/appwrite/sdk-for-go/databases"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/storage"

	"privateassistant/schema"
)

// Verify reads every record and file of the project back and compares them with an
// extracted archive (dir, as Restore extracts it): each archived document present with
// equal content, permissions and timestamps (a run the restore interrupted may differ in
// the fields that did), each file with the same size, SHA-256 and permissions, and no
// record or file the archive lacks except the version claims of interrupted runs (in
// every bucket of the model). So the counts match too.
func Verify(ctx context.Context, o Options, dir string, m *Manifest) error {
	o.defaults()
	db := databases.New(o.Client)
	// The runs a restore interrupts: their version claims are the only records the
	// archive lacks.
	interrupted := map[string]bool{}
	if _, ok := m.Counts.Documents[schema.CollRuns]; ok {
		runs, err := readDocs(dir, schema.CollRuns)
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		for _, d := range runs {
			if _, live := toBeInterrupted(d); live {
				id, _ := d["$id"].(string)
				interrupted[strings.ToLower(id)] = true
			}
		}
	}
	for coll, n := range m.Counts.Documents {
		want, err := readDocs(dir, coll)
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		if len(want) != n {
			return fmt.Errorf("%w: %s: the archive holds %d documents, its manifest says %d", ErrChecksum, coll, len(want), n)
		}
		got, err := listAll(ctx, o, db, coll)
		if err != nil {
			return err
		}
		for _, d := range want {
			id, _ := d["$id"].(string)
			g, ok := got[id]
			if !ok {
				return fmt.Errorf("%w: %s/%s was not restored", ErrChecksum, coll, id)
			}
			if !equalDoc(coll, d, g) {
				return fmt.Errorf("%w: %s/%s differs from the archive", ErrChecksum, coll, id)
			}
			delete(got, id)
		}
		// What is left must be the version claims the interruptions made.
		for id, g := range got {
			target, _ := g["target"].(string)
			run, isRun := strings.CutPrefix(target, schema.CollRuns+"/")
			if coll != schema.CollVersions || !isRun || !interrupted[strings.ToLower(run)] {
				return fmt.Errorf("%w: %s/%s is not in the archive", ErrNotEmpty, coll, id)
			}
		}
	}
	return verifyFiles(ctx, o, dir, m)
}

// listAll reads a whole collection (canonical documents by id).
func listAll(ctx context.Context, o Options, db *databases.Databases, coll string) (map[string]map[string]any, error) {
	o.defaults()
	out := map[string]map[string]any{}
	cursor := ""
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		qs := []string{query.Limit(o.PageSize)}
		if cursor != "" {
			qs = append(qs, query.CursorAfter(cursor))
		}
		list, err := db.ListDocuments(o.Model.DatabaseID, coll, db.WithListDocumentsQueries(qs), db.WithListDocumentsTotal(false))
		if err != nil {
			return nil, fmt.Errorf("verify: list %s: %w", coll, err)
		}
		var page struct {
			Documents []json.RawMessage `json:"documents"`
		}
		if err := list.Decode(&page); err != nil {
			return nil, err
		}
		for _, raw := range page.Documents {
			d, _, err := canonical(raw)
			if err != nil {
				return nil, err
			}
			cursor, _ = d["$id"].(string)
			out[cursor] = d
		}
		if len(page.Documents) < o.PageSize {
			return out, nil
		}
	}
}

// verifyFiles checks every bucket the archive holds against the project: each archived
// file there with the same size, SHA-256 and permissions, and no file the archive lacks.
// A bucket of the model the archive does not hold (a format 1 archive has no uploads)
// must be empty.
func verifyFiles(ctx context.Context, o Options, dir string, m *Manifest) error {
	st := storage.New(o.Client)
	held := map[string]bool{}
	nfiles := 0
	for _, part := range m.parts() {
		held[part.ID] = true
		lines, err := readFiles(dir, part)
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		if len(lines) != part.Files {
			return fmt.Errorf("%w: bucket %s: the archive holds %d files, its manifest says %d", ErrChecksum, part.ID, len(lines), part.Files)
		}
		nfiles += len(lines)
		have, err := listFileIDs(ctx, o, st, part.ID)
		if err != nil {
			return err
		}
		err = parallel(ctx, o.Workers, lines, func(fl fileLine) error {
			if !have[fl.ID] {
				return fmt.Errorf("%w: file %s/%s was not restored", ErrChecksum, part.ID, fl.ID)
			}
			if err := checkFile(st, part.ID, fl); err != nil {
				return fmt.Errorf("%w: %v", ErrChecksum, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(have) != len(lines) {
			return fmt.Errorf("%w: bucket %s holds %d files, the archive %d", ErrNotEmpty, part.ID, len(have), len(lines))
		}
	}
	if nfiles != m.Counts.Files {
		return fmt.Errorf("%w: the archive holds %d files, its manifest says %d", ErrChecksum, nfiles, m.Counts.Files)
	}
	for _, b := range o.Model.Buckets {
		if held[b.ID] {
			continue
		}
		have, err := listFileIDs(ctx, o, st, b.ID)
		if err != nil {
			return err
		}
		if len(have) > 0 {
			return fmt.Errorf("%w: bucket %s holds %d files, the archive none", ErrNotEmpty, b.ID, len(have))
		}
	}
	return nil
}

// listFileIDs lists a bucket's file ids.
func listFileIDs(ctx context.Context, o Options, st *storage.Storage, bucket string) (map[string]bool, error) {
	o.defaults()
	have := map[string]bool{}
	cursor := ""
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		qs := []string{query.Limit(o.PageSize)}
		if cursor != "" {
			qs = append(qs, query.CursorAfter(cursor))
		}
		list, err := st.ListFiles(bucket, st.WithListFilesQueries(qs), st.WithListFilesTotal(false))
		if err != nil {
			return nil, fmt.Errorf("verify: list bucket %s: %w", bucket, err)
		}
		for _, f := range list.Files {
			have[f.Id] = true
			cursor = f.Id
		}
		if len(list.Files) < o.PageSize {
			return have, nil
		}
	}
}
