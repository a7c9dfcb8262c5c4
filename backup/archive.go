package backup

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// members lists the staged members in archive order: each collection's documents in
// the model's order, then for each bucket in the model's order its files index and each
// of its files in the index's order.
func members(o Options, staging string) ([]string, error) {
	var out []string
	for _, c := range o.Model.Collections {
		out = append(out, docsDir+c.ID+".jsonl")
	}
	for _, bk := range o.Model.Buckets {
		dir := bucketDir(bk.ID)
		out = append(out, dir+filesIndex)
		err := eachLine(filepath.Join(staging, filepath.FromSlash(dir+filesIndex)), func(b []byte) error {
			var fl fileLine
			if err := json.Unmarshal(b, &fl); err != nil {
				return err
			}
			out = append(out, dir+blobsDir+fl.ID)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// eachLine calls fn with every line of a JSON-lines file.
func eachLine(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := fn(sc.Bytes()); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(path), err)
		}
	}
	return sc.Err()
}

func hashFile(path string) (Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Entry{}, err
	}
	return Entry{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// finish writes the manifest and packs the staged members into path (0600), through a
// temporary file renamed into place.
func finish(o Options, staging string, st *progress, path string) (*Manifest, error) {
	names, err := members(o, staging)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	m := &Manifest{Format: FormatVersion, CreatedAt: o.Now().UTC().Format(time.RFC3339Nano), ApplicationVersion: o.AppVersion,
		Schema: Schema(o.Model), Endpoint: st.Endpoint, Project: st.Project, Database: st.Database, KeyRef: o.KeyRef,
		Counts: Counts{Documents: map[string]int{}}}
	for _, c := range o.Model.Collections {
		m.Counts.Documents[c.ID] = st.Docs[c.ID].Count
	}
	for _, b := range o.Model.Buckets {
		cs := st.Buckets[b.ID]
		m.Buckets = append(m.Buckets, BucketCounts{ID: b.ID, Files: cs.Count, FileBytes: cs.Bytes})
		m.Counts.Files += cs.Count
		m.Counts.FileBytes += cs.Bytes
	}
	for _, name := range names {
		e, err := hashFile(filepath.Join(staging, name))
		if err != nil {
			return nil, fmt.Errorf("backup: %w", err)
		}
		e.Path = name
		m.Entries = append(m.Entries, e)
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil { // whatever the umask or an older file's mode
		f.Close()
		return nil, fmt.Errorf("backup: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	tw := tar.NewWriter(bw)
	mod := o.Now().UTC().Truncate(time.Second)
	add := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: size, ModTime: mod, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	err = add(manifestName, int64(len(mb)), bytes.NewReader(mb))
	for _, e := range m.Entries {
		if err != nil {
			break
		}
		var src *os.File
		if src, err = os.Open(filepath.Join(staging, e.Path)); err != nil {
			break
		}
		err = add(e.Path, e.Size, io.LimitReader(src, e.Size))
		src.Close()
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return nil, fmt.Errorf("backup: write %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return m, nil
}

// extract unpacks an archive into dir, checking every member against the manifest (the
// first member): its size and SHA-256, no member missing, none extra, none twice.
func extract(path, dir string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(bufio.NewReaderSize(f, 1<<20))
	hdr, err := tr.Next()
	if err != nil || hdr.Name != manifestName {
		return nil, fmt.Errorf("restore: %s does not start with %s (not a backup archive?)", path, manifestName)
	}
	var m Manifest
	if err := json.NewDecoder(io.LimitReader(tr, 64<<20)).Decode(&m); err != nil {
		return nil, fmt.Errorf("restore: read manifest: %w", err)
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	want := map[string]Entry{}
	for _, e := range m.Entries {
		want[e.Path] = e
	}
	seen := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("restore: read %s: %w", path, err)
		}
		e, ok := want[hdr.Name]
		if !ok || seen[hdr.Name] || hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%w: member %q is not in the manifest (or twice)", ErrChecksum, hdr.Name)
		}
		seen[hdr.Name] = true
		dst := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return nil, err
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(out, h), tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("restore: extract %s: %w", hdr.Name, err)
		}
		if n != e.Size || hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
			return nil, fmt.Errorf("%w: %s (%d bytes) differs from the manifest (%d bytes, sha256 %s)", ErrChecksum, hdr.Name, n, e.Size, e.SHA256)
		}
	}
	for _, e := range m.Entries {
		if !seen[e.Path] {
			return nil, fmt.Errorf("%w: %s is missing from the archive", ErrChecksum, e.Path)
		}
	}
	return &m, nil
}

// ReadManifest reads an archive's manifest (its first member) without extracting the rest.
func ReadManifest(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != manifestName {
		return nil, fmt.Errorf("backup: %s does not start with %s (not a backup archive?)", path, manifestName)
	}
	var m Manifest
	if err := json.NewDecoder(io.LimitReader(tr, 64<<20)).Decode(&m); err != nil {
		return nil, fmt.Errorf("backup: read manifest: %w", err)
	}
	return &m, m.check()
}
