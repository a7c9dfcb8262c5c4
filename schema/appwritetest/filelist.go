package appwritetest

import (
	"math"
	"net/http"
	"sort"
)

// routesFileList serves GET /v1/storage/buckets/{bucket}/files (listFiles), as
// src/Appwrite/Platform/Modules/Storage/Http/Buckets/Files/XList.php at 1.9.6: queries
// limit (default 25), offset, cursorAfter/cursorBefore (a file id; an unknown one is 400
// general_cursor_not_found), total=false answers total 0. Files come in creation order
// (Appwrite's $sequence; here $createdAt, then id). Filters and search are not modelled:
// a query other than limit, offset or a cursor is 400 general_query_invalid.
func (s *Server) routesFileList() {
	s.handle("GET /v1/storage/buckets/{bucket}/files", "files.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		qs, err := parseQueries(r)
		if err != nil {
			return err
		}
		limit, offset := 25, 0
		var cursor *appQuery
		for i, q := range qs {
			switch q.Method {
			case "limit":
				n, err := intValue(q)
				if err != nil || n < 0 {
					return errQuery("Invalid limit: Value must be a valid range between 0 and %d", math.MaxInt64)
				}
				limit = n
			case "offset":
				n, err := intValue(q)
				if err != nil || n < 0 {
					return errQuery("Invalid offset: Value must be a valid range between 0 and 5,000")
				}
				offset = n
			case "cursorAfter", "cursorBefore":
				if cursor == nil {
					cursor = &qs[i]
				}
			default:
				return errQuery("Invalid query: %s is not modelled by this emulator's listFiles", q.Method)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		b, err := s.bucketForCaller(r.PathValue("bucket"), c)
		if err != nil {
			return err
		}
		if !b.FileSecurity && !canFile(c, b, nil, "read") {
			return errUnauthorized()
		}
		files := make([]*file, 0, len(b.Files))
		for _, f := range b.Files {
			if canFile(c, b, f, "read") {
				files = append(files, f)
			}
		}
		sort.Slice(files, func(i, j int) bool {
			if !files[i].CreatedAt.Equal(files[j].CreatedAt) {
				return files[i].CreatedAt.Before(files[j].CreatedAt)
			}
			return files[i].ID < files[j].ID
		})
		total := len(files)
		if cursor != nil {
			ids := cursor.strValues()
			at := -1
			for i, f := range files {
				if len(ids) == 1 && f.ID == ids[0] {
					at = i
				}
			}
			if at < 0 {
				id := ""
				if len(ids) > 0 {
					id = ids[0]
				}
				return errf(400, "general_cursor_not_found", "File '%s' for the 'cursor' value not found.", id)
			}
			if cursor.Method == "cursorAfter" {
				files = files[at+1:]
			} else {
				files = files[:at]
				if len(files) > limit {
					files = files[len(files)-limit:]
				}
			}
		}
		if offset >= len(files) {
			files = nil
		} else {
			files = files[offset:]
		}
		if len(files) > limit {
			files = files[:limit]
		}
		out := make([]map[string]any, 0, len(files))
		for _, f := range files {
			out = append(out, fileJSON(b, f))
		}
		if r.URL.Query().Get("total") == "false" {
			total = 0
		}
		writeJSON(w, 200, map[string]any{"total": total, "files": out})
		return nil
	})
}
