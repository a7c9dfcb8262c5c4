package appwritetest

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

func bucketJSON(b *bucket) map[string]any {
	perms := b.Permissions
	if perms == nil {
		perms = []string{}
	}
	exts := b.AllowedFileExtensions
	if exts == nil {
		exts = []string{}
	}
	var total int64
	for _, f := range b.Files {
		total += int64(len(f.data))
	}
	return map[string]any{
		"$id": b.ID, "$createdAt": fmtTime(b.CreatedAt), "$updatedAt": fmtTime(b.UpdatedAt),
		"$permissions": perms, "fileSecurity": b.FileSecurity, "name": b.Name, "enabled": b.Enabled,
		"maximumFileSize": b.MaximumFileSize, "allowedFileExtensions": exts,
		"compression": b.Compression, "encryption": b.Encryption, "antivirus": b.Antivirus,
		"transformations": b.Transformations, "totalSize": total,
	}
}

func fileJSON(b *bucket, f *file) map[string]any {
	perms := f.Permissions
	if perms == nil {
		perms = []string{}
	}
	return map[string]any{
		"$id": f.ID, "bucketId": b.ID, "$createdAt": fmtTime(f.CreatedAt), "$updatedAt": fmtTime(f.UpdatedAt),
		"$permissions": perms, "name": f.Name, "signature": f.Signature, "mimeType": f.MimeType,
		"sizeOriginal": f.Size, "sizeActual": f.Size, "chunksTotal": f.ChunksTotal,
		"chunksUploaded": f.ChunksUploaded, "encryption": b.Encryption && f.Size <= 20_000_000,
		"compression": b.Compression,
	}
}

func canFile(c *caller, b *bucket, f *file, action string) bool {
	if c.kind == keyCaller {
		return true
	}
	roles := c.roles()
	if holds(b.Permissions, action, roles) {
		return true
	}
	return b.FileSecurity && f != nil && holds(f.Permissions, action, roles)
}

func (s *Server) bucketForCaller(id string, c *caller) (*bucket, error) {
	b := s.st.Buckets[id]
	if b == nil || (c.kind != keyCaller && !b.Enabled) {
		return nil, errBucketNotFound()
	}
	return b, nil
}

func (s *Server) routesStorage() {
	s.handle("POST /v1/storage/buckets", "buckets.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		raw, _ := str(body, "bucketId")
		id, err := resolveID("bucketId", raw)
		if err != nil {
			return err
		}
		name, _ := str(body, "name")
		perms, _, err := strList(body, "permissions")
		if err != nil {
			return err
		}
		if err := validatePermissions("permissions", perms, "read", "create", "update", "delete", "write"); err != nil {
			return err
		}
		b := &bucket{ID: id, Name: name, Permissions: expandPermissions(perms), Compression: "none"}
		if b.FileSecurity, err = boolean(body, "fileSecurity", false); err != nil {
			return err
		}
		if b.Enabled, err = boolean(body, "enabled", true); err != nil {
			return err
		}
		if b.Encryption, err = boolean(body, "encryption", true); err != nil {
			return err
		}
		if b.Antivirus, err = boolean(body, "antivirus", true); err != nil {
			return err
		}
		if b.Transformations, err = boolean(body, "transformations", true); err != nil {
			return err
		}
		b.MaximumFileSize = s.opts.StorageLimit
		if n, ok, err := intParam(body, "maximumFileSize"); err != nil {
			return err
		} else if ok {
			if n < 1 || n > s.opts.StorageLimit {
				return errArgument("maximumFileSize", "Value must be a valid range between 1 and %d", s.opts.StorageLimit)
			}
			b.MaximumFileSize = n
		}
		if exts, ok, err := strList(body, "allowedFileExtensions"); err != nil {
			return err
		} else if ok {
			b.AllowedFileExtensions = exts
		}
		if comp, ok := str(body, "compression"); ok {
			if comp != "none" && comp != "gzip" && comp != "zstd" {
				return errArgument("compression", "Value must be one of (none, gzip, zstd)")
			}
			b.Compression = comp
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.st.Buckets[id] != nil {
			return errf(409, "storage_bucket_already_exists", "A storage bucket with the requested ID already exists. Try again with a different ID or use ID.unique() to generate a unique ID.")
		}
		now := s.now()
		b.CreatedAt, b.UpdatedAt, b.Files = now, now, map[string]*file{}
		s.st.Buckets[id] = b
		s.changed()
		writeJSON(w, 201, bucketJSON(b))
		return nil
	})
	s.handle("GET /v1/storage/buckets", "buckets.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		out := []map[string]any{}
		for _, k := range sortedKeys(s.st.Buckets) {
			out = append(out, bucketJSON(s.st.Buckets[k]))
		}
		writeJSON(w, 200, map[string]any{"total": len(out), "buckets": out})
		return nil
	})
	s.handle("GET /v1/storage/buckets/{bucket}", "buckets.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		b := s.st.Buckets[r.PathValue("bucket")]
		if b == nil {
			return errBucketNotFound()
		}
		writeJSON(w, 200, bucketJSON(b))
		return nil
	})

	s.handle("POST /v1/storage/buckets/{bucket}/files", "files.write", s.uploadFile)
	s.handle("GET /v1/storage/buckets/{bucket}/files/{file}", "files.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		b, err := s.bucketForCaller(r.PathValue("bucket"), c)
		if err != nil {
			return err
		}
		f := s.getFile(b, r.PathValue("file"))
		if f == nil || !canFile(c, b, f, "read") {
			return errFileNotFound()
		}
		writeJSON(w, 200, fileJSON(b, f))
		return nil
	})
	s.handle("GET /v1/storage/buckets/{bucket}/files/{file}/download", "files.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		b, err := s.bucketForCaller(r.PathValue("bucket"), c)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		f := s.getFile(b, r.PathValue("file"))
		if f == nil || !canFile(c, b, f, "read") || f.ChunksUploaded < f.ChunksTotal {
			s.mu.Unlock()
			return errFileNotFound()
		}
		data, name, mt, mod := f.data, f.Name, f.MimeType, f.UpdatedAt
		s.mu.Unlock()
		_ = mod // Appwrite answers no conditional request (If-Modified-Since, If-Range)
		size := int64(len(data))
		status := 200
		if rg := r.Header.Get("Range"); rg != "" {
			start, end, err := checkRange(rg, size)
			if err != nil {
				return err
			}
			w.Header().Set("Accept-Ranges", "bytes")
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, size))
			data, status = data[start:end+1], 206
		}
		w.Header().Set("Content-Type", mt)
		w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(status)
		_, _ = w.Write(data)
		return nil
	})
	s.handle("DELETE /v1/storage/buckets/{bucket}/files/{file}", "files.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		b, err := s.bucketForCaller(r.PathValue("bucket"), c)
		if err != nil {
			return err
		}
		f := s.getFile(b, r.PathValue("file"))
		if f == nil || !canFile(c, b, f, "read") {
			return errFileNotFound()
		}
		if !canFile(c, b, f, "delete") {
			return errUnauthorized()
		}
		delete(b.Files, f.ID)
		if b.ids != nil {
			b.ids.remove(f.ID, f)
		}
		s.removeBlob(b.ID, f.ID)
		s.changed()
		w.WriteHeader(204)
		return nil
	})
}

var rangeRe = regexp.MustCompile(`^bytes=(\d+)-(\d*)$`)

// Appwrite 1.9.6's download limits (app/init/constants.php): MAX_OUTPUT_CHUNK_SIZE and
// APP_STORAGE_READ_BUFFER.
const (
	maxOutputChunk    = 10 * 1024 * 1024
	storageReadBuffer = 20 * 1000 * 1000
)

// checkRange is Appwrite's download range rule (app/controllers/api/storage.php): one
// range with a start (utopia's parser knows no suffix or multiple ranges); an open end,
// or a range longer than the read buffer, is cut to MAX_OUTPUT_CHUNK_SIZE bytes from the
// start; start >= end (so a one-byte range too) or end >= size is 416.
func checkRange(h string, size int64) (start, end int64, err error) {
	bad := errf(416, "storage_invalid_range", "The requested range is not satisfiable")
	m := rangeRe.FindStringSubmatch(h)
	if m == nil {
		return 0, 0, bad
	}
	start, err1 := strconv.ParseInt(m[1], 10, 64)
	end = -1
	if m[2] != "" {
		var err2 error
		if end, err2 = strconv.ParseInt(m[2], 10, 64); err2 != nil {
			return 0, 0, bad
		}
	}
	if err1 != nil {
		return 0, 0, bad
	}
	if end < 0 || end-start > storageReadBuffer {
		end = min(start+maxOutputChunk-1, size-1)
	}
	if start >= end || end >= size {
		return 0, 0, bad
	}
	return start, end, nil
}

var contentRangeRe = regexp.MustCompile(`^bytes (\d+)-(\d+)/(\d+)$`)

func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		return errf(400, "storage_file_empty", "Empty file passed to the endpoint.")
	}
	fh, hdr, err := r.FormFile("file")
	if err != nil {
		return errf(400, "storage_file_empty", "Empty file passed to the endpoint.")
	}
	chunk, err := io.ReadAll(fh)
	fh.Close()
	if err != nil {
		return errf(400, "storage_file_empty", "Empty file passed to the endpoint.")
	}
	var perms []string
	var permsGiven bool
	for k, vs := range r.MultipartForm.Value {
		if k == "permissions" || strings.HasPrefix(k, "permissions[") {
			perms = append(perms, vs...)
			permsGiven = true
		}
	}
	if err := validatePermissions("permissions", perms, "read", "update", "delete", "write"); err != nil {
		return err
	}
	perms = expandPermissions(perms)
	name := hdr.Filename

	// Chunk arithmetic, exactly as Files/Create.php: the index comes from the start offset.
	var start, end, total int64 = 0, int64(len(chunk)) - 1, int64(len(chunk))
	chunked := false
	if cr := r.Header.Get("Content-Range"); cr != "" {
		m := contentRangeRe.FindStringSubmatch(cr)
		if m == nil {
			return errf(400, "storage_invalid_content_range", "Invalid content range.")
		}
		start, _ = strconv.ParseInt(m[1], 10, 64)
		end, _ = strconv.ParseInt(m[2], 10, 64)
		total, _ = strconv.ParseInt(m[3], 10, 64)
		if end < start || end >= total || end-start+1 != int64(len(chunk)) || start%ChunkSize != 0 {
			return errf(400, "storage_invalid_content_range", "Invalid content range.")
		}
		chunked = true
	}
	chunksTotal := int((total + ChunkSize - 1) / ChunkSize)
	if chunksTotal == 0 {
		chunksTotal = 1
	}
	idx := int(start/ChunkSize) + 1
	if chunked && idx < chunksTotal && int64(len(chunk)) != ChunkSize {
		return errf(400, "storage_invalid_content_range", "Invalid content range.")
	}

	fileID := r.FormValue("fileId")
	if xid := r.Header.Get("X-Appwrite-Id"); xid != "" {
		if xid == "unique()" || !customIDRe.MatchString(xid) {
			return errf(400, "storage_invalid_appwrite_id", "The value for x-appwrite-id header is invalid. Please check the value of the x-appwrite-id header is a valid id and not unique().")
		}
		fileID = xid
	} else if chunked && idx > 1 && !s.prof.realUploadResume {
		return errf(400, "storage_invalid_appwrite_id", "The value for x-appwrite-id header is invalid. Please check the value of the x-appwrite-id header is a valid id and not unique().")
	}
	// On a real engine a chunk without x-appwrite-id falls back to the form's fileId
	// (Files/Create.php: getHeaderLine('x-appwrite-id', $fileId)); unique() there is a
	// fresh id, so such a chunk starts a new, never-completed file.
	fileID, err = resolveID("fileId", fileID)
	if err != nil {
		return err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucketForCaller(r.PathValue("bucket"), c)
	if err != nil {
		return err
	}
	if !canFile(c, b, nil, "create") {
		return errUnauthorized()
	}
	if err := checkGrantable(c, perms); err != nil {
		return err
	}
	if total > b.MaximumFileSize {
		return errf(400, "storage_invalid_file_size", "The given file size is not valid. Maximum file size is %d bytes.", b.MaximumFileSize)
	}
	if len(b.AllowedFileExtensions) > 0 {
		ext := strings.TrimPrefix(strings.ToLower(filepath.Ext(name)), ".")
		if !contains(b.AllowedFileExtensions, ext) {
			return errf(400, "storage_file_type_unsupported", "The given file extension is not supported.")
		}
	}
	now := s.now()
	f := s.getFile(b, fileID)
	if f != nil && f.ChunksUploaded >= f.ChunksTotal {
		if chunked && s.prof.realUploadResume {
			// A chunk of a completed upload: 200 with the file, nothing written.
			writeJSON(w, 200, fileJSON(b, f))
			return nil
		}
		return errf(409, "storage_file_already_exists", "A storage file with the requested ID already exists.")
	}
	if f == nil && s.prof.idFoldUnique {
		if _, taken := b.lookup(fileID, true); taken {
			return errf(409, "storage_file_already_exists", "A storage file with the requested ID already exists.")
		}
	}
	if f == nil {
		if !permsGiven && c.kind == userCaller {
			u := "user:" + c.user.ID
			perms = []string{`read("` + u + `")`, `update("` + u + `")`, `delete("` + u + `")`}
		}
		f = &file{ID: fileID, Name: name, Permissions: perms, Size: total, ChunksTotal: chunksTotal,
			CreatedAt: now, UpdatedAt: now, chunks: map[int][]byte{}}
		b.Files[fileID] = f
		if b.ids != nil {
			b.ids.add(fileID, f)
		}
	} else if f.Size != total || f.ChunksTotal != chunksTotal {
		return errf(400, "storage_invalid_content_range", "Invalid content range.")
	}
	if f.chunks == nil {
		f.chunks = map[int][]byte{}
	}
	if _, dup := f.chunks[idx]; !dup {
		f.chunks[idx] = chunk
		f.ChunksUploaded++
	}
	f.UpdatedAt = now
	if f.ChunksUploaded >= f.ChunksTotal {
		var buf bytes.Buffer
		for i := 1; i <= f.ChunksTotal; i++ {
			buf.Write(f.chunks[i])
		}
		f.data = buf.Bytes()
		f.chunks = nil
		f.Signature = s.signature(f.data, f.ChunksTotal)
		f.MimeType = detectMime(name, f.data)
		if err := s.writeBlob(b.ID, f.ID, f.data); err != nil {
			return fmt.Errorf("write blob: %w", err)
		}
	}
	b.UpdatedAt = now
	s.changed()
	writeJSON(w, 201, fileJSON(b, f))
	return nil
}

func detectMime(name string, data []byte) string {
	if t := mime.TypeByExtension(filepath.Ext(name)); t != "" {
		if i := strings.Index(t, ";"); i > 0 {
			t = t[:i]
		}
		return t
	}
	t := http.DetectContentType(data)
	if i := strings.Index(t, ";"); i > 0 {
		t = t[:i]
	}
	return t
}

// signature is what Appwrite stores as a file's signature: the device's getFileHash of
// the assembled upload. The local device returns md5_file; an S3-type device returns the
// object's ETag, which for a multipart upload (more than one chunk) is S3's
// md5(concat(md5(part)...))-<parts>, not an MD5 of the content.
func (s *Server) signature(data []byte, chunks int) string {
	if s.opts.StorageDevice != DeviceS3 || chunks <= 1 {
		sum := md5.Sum(data)
		return hex.EncodeToString(sum[:])
	}
	var cat []byte
	for off := 0; off < len(data); off += ChunkSize {
		part := md5.Sum(data[off:min(off+ChunkSize, len(data))])
		cat = append(cat, part[:]...)
	}
	sum := md5.Sum(cat)
	return fmt.Sprintf("%s-%d", hex.EncodeToString(sum[:]), chunks)
}
