package executor

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The checkpoint before a pause (issue 36, item 4). When a run yields its device to a
// swap, its work folder (the member's, or the shared Hermes's) is saved before the device
// is given up: a tar of its regular files under CheckpointRoot/<run>/p<n>.tar, and the
// folder's digest recorded on the run (runs.checkpoint: "p<n> sha256:<hex>"). When the run
// has its device again it checks the folder against the checkpoint: every file the
// checkpoint holds must be there with the same content; one that is missing or changed is
// restored from the tar, and the run goes on only once the folder matches (files added in
// the meantime are left alone). Nothing the run wrote before the pause is lost. The tar is
// removed once the folder matches (kept when it cannot be made to).

// maxCheckpoint bounds a checkpoint: a larger folder is not saved (logged).
const maxCheckpoint = 2 << 30

// folderFile is one regular file of a folder, by its path relative to the folder.
type folderFile struct {
	rel  string
	mode fs.FileMode
	size int64
	sum  string
}

// scanFolder lists root's regular files (symlinks and other specials are not followed nor
// saved), sorted.
func scanFolder(root *os.Root) ([]folderFile, error) {
	var out []folderFile
	var total int64
	err := fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		sum, size, err := fileSum(root, rel)
		if err != nil {
			return err
		}
		if total += size; total > maxCheckpoint {
			return fmt.Errorf("the folder holds more than %d bytes", maxCheckpoint)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, folderFile{rel: filepath.ToSlash(rel), mode: info.Mode().Perm(), size: size, sum: sum})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, err
}

func fileSum(root *os.Root, rel string) (string, int64, error) {
	f, err := root.Open(filepath.FromSlash(rel))
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// folderDigest is the digest of a file list: paths, modes and contents.
func folderDigest(files []folderFile) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%o\x00%s\n", f.rel, f.mode, f.sum)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// saveCheckpoint writes dir's regular files to the tar at path (atomically) and returns
// the folder's digest.
func saveCheckpoint(dir, path string) (string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	return saveCheckpointIn(root, path)
}

// saveCheckpointIn is saveCheckpoint of the folder opened as root: nothing outside it is
// read (the attempt opens a member's folder from their home: openDir).
func saveCheckpointIn(root *os.Root, path string) (string, error) {
	files, err := scanFolder(root)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	tmp := path + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, ff := range files {
		if err := addFile(tw, root, ff); err != nil {
			f.Close()
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	// What was saved is what the tar holds: the digest is of its entries, read back.
	saved, err := tarFiles(tmp)
	if err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	return folderDigest(saved), nil
}

func addFile(tw *tar.Writer, root *os.Root, ff folderFile) error {
	src, err := root.Open(filepath.FromSlash(ff.rel))
	if err != nil {
		return err
	}
	defer src.Close()
	if err := tw.WriteHeader(&tar.Header{Name: ff.rel, Mode: int64(ff.mode), Size: ff.size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.CopyN(tw, src, ff.size) // a file that shrank meanwhile fails the save
	return err
}

// tarFiles lists a checkpoint's files with their sums.
func tarFiles(path string) ([]folderFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var out []folderFile
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		n, err := io.Copy(h, tr)
		if err != nil {
			return nil, err
		}
		out = append(out, folderFile{rel: hd.Name, mode: fs.FileMode(hd.Mode).Perm(), size: n, sum: hex.EncodeToString(h.Sum(nil))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, nil
}

// checkCheckpoint makes dir hold every file of the checkpoint at path as saved: missing
// or changed ones are restored from the tar. It returns how many were restored, and an
// error when the tar does not match want or the folder cannot be made to match it.
func checkCheckpoint(dir, path, want string) (int, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	return checkCheckpointIn(root, path, want)
}

// checkCheckpointIn is checkCheckpoint of the folder opened as root: nothing outside it is
// read or written.
func checkCheckpointIn(root *os.Root, path, want string) (int, error) {
	saved, err := tarFiles(path)
	if err != nil {
		return 0, fmt.Errorf("read the checkpoint: %w", err)
	}
	if got := folderDigest(saved); got != want {
		return 0, fmt.Errorf("the checkpoint's digest is %s, the run recorded %s", got, want)
	}
	var bad []string
	for _, ff := range saved {
		sum, _, err := fileSum(root, ff.rel)
		info, serr := root.Lstat(filepath.FromSlash(ff.rel))
		if err != nil || serr != nil || sum != ff.sum || info.Mode().Perm() != ff.mode || !info.Mode().IsRegular() {
			bad = append(bad, ff.rel)
		}
	}
	if len(bad) == 0 {
		return 0, nil
	}
	if err := restoreFiles(root, path, bad); err != nil {
		return 0, fmt.Errorf("restore %s: %w", strings.Join(bad, ", "), err)
	}
	for _, ff := range saved {
		sum, _, err := fileSum(root, ff.rel)
		if err != nil || sum != ff.sum {
			return 0, fmt.Errorf("%s does not match the checkpoint after its restore", ff.rel)
		}
	}
	return len(bad), nil
}

// restoreFiles writes the named entries of the tar at path back into root: a symlink a
// tool left in the folder never takes a write outside it.
func restoreFiles(root *os.Root, path string, names []string) error {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel := filepath.FromSlash(hd.Name)
		if !want[hd.Name] || !filepath.IsLocal(rel) {
			continue
		}
		if err := root.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
			return err
		}
		_ = root.Remove(rel) // a symlink or special put in its place is replaced, never followed
		mode := fs.FileMode(hd.Mode).Perm()
		out, err := root.OpenFile(rel, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, tr); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
		if err := root.Chmod(rel, mode); err != nil {
			return err
		}
	}
}

// checkpointPath is where the run's n-th pause is saved.
func (e *Executor) checkpointPath(run string, n int) string {
	root := e.CheckpointRoot
	if root == "" {
		root = filepath.Join(os.TempDir(), "pa-checkpoints")
	}
	return filepath.Join(root, run, fmt.Sprintf("p%d.tar", n))
}

// checkpointDir is the folder a pause checkpoints: the run's own folder where the harness
// works in it (a member's Hermes: the member's other runs change theirs meanwhile, and a
// restore must never undo another run's work), else the shared work folder.
func (a *attempt) checkpointDir() string {
	if host, _ := a.runFolder(); a.ownFolder && host != "" {
		return host
	}
	return a.workDir
}

// checkpoint saves the run's work folder before the pause gives the device up, and
// returns what the run records ("p<n> sha256:<hex>"; "" without a work folder). A failed
// save is logged and the pause goes on without one (the run is not worse off than before).
func (a *attempt) checkpoint(context.Context) string {
	dir := a.checkpointDir()
	if dir == "" {
		return ""
	}
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	root, err := a.openDir(dir) // from the member's home: never through a link out of it
	if err != nil {
		a.e.log().Warn("work folder not checkpointed before the pause", "run", a.runID, "err", err)
		return ""
	}
	defer root.Close()
	d, err := saveCheckpointIn(root, a.e.checkpointPath(a.runID, a.pauses))
	if err != nil {
		a.e.log().Warn("work folder not checkpointed before the pause", "run", a.runID, "err", err)
		return ""
	}
	a.checkpointed = fmt.Sprintf("p%d %s", a.pauses, d)
	return a.checkpointed
}

// checkResumed checks the work folder against the pause's checkpoint once the run has
// its device again (restoring what is missing or changed).
func (a *attempt) checkResumed() error {
	if a.checkpointed == "" {
		return nil
	}
	n, digest, _ := strings.Cut(a.checkpointed, " ")
	var p int
	if _, err := fmt.Sscanf(n, "p%d", &p); err != nil {
		return fmt.Errorf("bad checkpoint record %q", a.checkpointed)
	}
	path := a.e.checkpointPath(a.runID, p)
	root, err := a.openDir(a.checkpointDir()) // from the member's home: never through a link out of it
	if err != nil {
		return err
	}
	defer root.Close()
	restored, err := checkCheckpointIn(root, path, digest)
	if err != nil {
		return err // the tar stays for an operator to look at
	}
	a.checkpointed = ""
	_ = os.Remove(path) // served its purpose; the record keeps the digest
	_ = os.Remove(filepath.Dir(path))
	if restored > 0 {
		a.e.log().Warn("files of the paused run's work folder were restored from its checkpoint", "run", a.runID, "files", restored)
	}
	return nil
}
