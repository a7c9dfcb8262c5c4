package artifacts

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"privateassistant/schema"
)

// reasonOutside: a named path that is not inside the work folder.
const reasonOutside = "outside the work folder"

// Resolve maps a path a run's file tool named onto a slash-separated path relative to
// the work folder. cwd is the folder as the harness sees it (Hermes's terminal.cwd):
// relative names are taken against it, absolute ones must lie inside it. reason is set
// (and rel empty) when the name is refused: empty, the folder itself, a home-relative
// name (~), or anything leading outside the folder. Symbolic and hard links are checked
// when the file is opened (UploadFiles), not here.
func Resolve(cwd, name string) (rel, reason string) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", "no path"
	case strings.HasPrefix(name, "~"), cwd == "" || !filepath.IsAbs(cwd):
		return "", reasonOutside
	}
	cwd = filepath.Clean(cwd)
	p := name
	if !filepath.IsAbs(p) {
		p = filepath.Join(cwd, p)
	}
	r, err := filepath.Rel(cwd, filepath.Clean(p))
	if err != nil || r == "." || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) || filepath.IsAbs(r) {
		return "", reasonOutside
	}
	return filepath.ToSlash(r), ""
}

// UploadFiles uploads the files a run's tools named (names, as the harness named them)
// from a work folder shared by many runs: dir is the folder as this host sees it, cwd as
// the harness sees it (the same path when both run on one host). Each name is resolved
// inside the folder (Resolve; a name outside it is skipped with the reason) and opened
// the way UploadDir opens a run's files: with os.Root and O_NOFOLLOW, regular files with
// exactly one link only, copied to a private file before the upload. Nothing else in the
// folder is read, so a run uploads only the files it wrote, never another run's.
func (u *Uploader) UploadFiles(ctx context.Context, dir, cwd string, names []string, run *schema.Run) ([]schema.Artifact, []Skipped, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	return u.UploadFilesIn(ctx, root, dir, cwd, names, run)
}

// UploadFilesIn is UploadFiles for the folder dir already opened as root: a caller whose
// folder lies in a tree the run's tools can change (a member's home) opens it from a root
// above it (os.Root.OpenRoot), so a folder the run swapped for a link out of that tree is
// never entered.
func (u *Uploader) UploadFilesIn(ctx context.Context, root *os.Root, dir, cwd string, names []string, run *schema.Run) ([]schema.Artifact, []Skipped, error) {
	var rels []string
	var skipped []Skipped
	seen := map[string]bool{}
	// Hermes reports the files it wrote by their resolved path (symbolic links in the
	// folder's own path resolved): on one host, the folder's real path is the folder too.
	realDir := ""
	if filepath.Clean(cwd) == filepath.Clean(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil && r != filepath.Clean(dir) {
			realDir = r
		}
	}
	for _, n := range names {
		rel, why := Resolve(cwd, n)
		if why != "" && realDir != "" && filepath.IsAbs(strings.TrimSpace(n)) {
			if r, w := Resolve(realDir, n); w == "" {
				rel, why = r, ""
			}
		}
		switch {
		case why != "":
			skipped = append(skipped, Skipped{truncateName(n), why})
		case !seen[rel]:
			seen[rel] = true
			rels = append(rels, rel)
		}
	}
	if len(rels) == 0 {
		return nil, skipped, nil
	}
	// A named file may have been removed since the run wrote it: that is not a failure.
	return u.uploadRoot(ctx, root, rels, run, skipped, true)
}

// truncateName keeps a refused name short enough to show.
func truncateName(n string) string {
	if len(n) > 255 {
		return n[:255]
	}
	return n
}
