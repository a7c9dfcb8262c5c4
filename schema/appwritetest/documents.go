package appwritetest

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

func docJSON(c *collection, d *document, sel []string) map[string]any {
	perms := d.Permissions
	if perms == nil {
		perms = []string{}
	}
	// The 1.8 response filter (V21::castSequence) casts a numeric $sequence to int and
	// anything else, such as MongoDB's UUIDv7, to 0.
	var seq int64 = d.Seq
	if d.UUID != "" {
		seq = 0
	}
	m := map[string]any{
		"$id": d.ID, "$sequence": seq, "$collectionId": c.ID, "$databaseId": c.DatabaseID,
		"$createdAt": fmtTime(d.CreatedAt), "$updatedAt": fmtTime(d.UpdatedAt), "$permissions": perms,
	}
	for _, a := range c.Attributes {
		if a.Status != "available" {
			continue
		}
		if sel != nil && !contains(sel, a.Key) && !contains(sel, "*") {
			continue
		}
		m[a.Key] = d.Data[a.Key]
	}
	return m
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// canRead is Appwrite's union rule: collection permission, or document permission when
// documentSecurity is on. API keys bypass authorization entirely.
func canDo(c *caller, col *collection, d *document, action string) bool {
	if c.kind == keyCaller {
		return true
	}
	roles := c.roles()
	if holds(col.Permissions, action, roles) {
		return true
	}
	return col.DocumentSecurity && d != nil && holds(d.Permissions, action, roles)
}

// collForCaller loads a collection, hiding disabled ones from non-key callers.
func (s *Server) collForCaller(r *http.Request, c *caller) (*collection, error) {
	col, err := s.getColl(r.PathValue("db"), r.PathValue("coll"))
	if err != nil {
		return nil, err
	}
	if c.kind != keyCaller && !col.Enabled {
		return nil, errCollectionNotFound()
	}
	return col, nil
}

func dataParam(body map[string]any) (map[string]any, error) {
	v, ok := body["data"]
	if !ok || v == nil {
		return map[string]any{}, nil
	}
	switch x := v.(type) {
	case map[string]any:
		return x, nil
	case string:
		m := map[string]any{}
		dec := json.NewDecoder(strings.NewReader(x))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			return nil, errArgument("data", "Value must be a valid JSON")
		}
		return m, nil
	}
	return nil, errArgument("data", "Value must be a valid JSON")
}

// applyData validates data against the collection's attributes and merges it into dst.
// create=true also enforces required attributes and fills defaults.
func applyData(col *collection, dst, data map[string]any, create bool) error {
	for k, v := range data {
		if strings.HasPrefix(k, "$") {
			switch k {
			case "$id", "$permissions", "$collectionId", "$databaseId", "$createdAt", "$updatedAt", "$sequence":
				continue // Appwrite ignores system fields inside data.
			}
		}
		a := col.attr(k)
		if a == nil {
			return errInvalidStructure("Unknown attribute: \"%s\"", k)
		}
		if a.Status != "available" {
			return errf(400, "attribute_not_available", "The requested attribute is not yet available. Please try again later.")
		}
		if v == nil {
			if a.Required {
				return errInvalidStructure("Missing required attribute \"%s\"", k)
			}
			dst[k] = nil
			continue
		}
		norm, err := checkValue(a, v)
		if err != nil {
			return errInvalidStructure("%s", err.Error())
		}
		dst[k] = norm
	}
	if create {
		for _, a := range col.Attributes {
			if _, ok := dst[a.Key]; ok {
				continue
			}
			if a.Required {
				if a.Status != "available" {
					return errf(400, "attribute_not_available", "The requested attribute is not yet available. Please try again later.")
				}
				return errInvalidStructure("Missing required attribute \"%s\"", a.Key)
			}
			dst[a.Key] = a.Default
		}
	}
	return nil
}

// checkUnique enforces available unique indexes for d (excluding itself): it looks d's
// key up in each index's documents by key (uniqueindex.go), not over every document.
func (col *collection) checkUnique(d *document, p *profile) error {
	for _, i := range col.Indexes {
		if i.Type != "unique" || i.Status != "available" {
			continue
		}
		k, ok := col.uniqueKey(i, d, p)
		if !ok {
			continue
		}
		for _, o := range col.uniqueDocs(i, p)[k] {
			if o.ID == d.ID || col.Docs[o.ID] != o {
				continue
			}
			// Verified: o holds k now (uniqueindex.go).
			if k2, ok2 := col.uniqueKey(i, o, p); ok2 && k2 == k {
				return errDocumentExists()
			}
		}
	}
	return nil
}

func (s *Server) permsParam(body map[string]any, c *caller) ([]string, bool, error) {
	perms, ok, err := strList(body, "permissions")
	if err != nil || !ok {
		return nil, ok, err
	}
	if err := validatePermissions("permissions", perms, "read", "update", "delete", "write"); err != nil {
		return nil, true, err
	}
	if err := checkGrantable(c, perms); err != nil {
		return nil, true, err
	}
	return expandPermissions(perms), true, nil
}

func (s *Server) routesDocuments() {
	base := "/v1/databases/{db}/collections/{coll}/documents"

	s.handle("POST "+base, "documents.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		if _, ok := body["transactionId"]; ok {
			return errf(400, "general_argument_invalid", "Transactions are not supported by this emulator")
		}
		if _, ok := body["documents"]; ok {
			return errf(400, "general_argument_invalid", "Bulk create is not supported by this emulator")
		}
		raw, _ := str(body, "documentId")
		id, err := resolveID("documentId", raw)
		if err != nil {
			return err
		}
		data, err := dataParam(body)
		if err != nil {
			return err
		}
		if s.prof.realDocumentWrites && len(data) == 0 {
			return errMissingData()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		perms, given, err := s.permsParam(body, c)
		if err != nil {
			return err
		}
		col, err := s.collForCaller(r, c)
		if err != nil {
			return err
		}
		if !canDo(c, col, nil, "create") {
			return errUnauthorized()
		}
		if !given {
			perms = []string{}
			if c.kind == userCaller {
				u := "user:" + c.user.ID
				perms = []string{`read("` + u + `")`, `update("` + u + `")`, `delete("` + u + `")`}
			}
		}
		now := s.now()
		d := &document{ID: id, Permissions: perms, Data: map[string]any{}, CreatedAt: now, UpdatedAt: now}
		if err := applyData(col, d.Data, data, true); err != nil {
			return err
		}
		if err := preserveDates(c, d, data); err != nil {
			return err
		}
		if s.docIDTaken(col, id) {
			return errDocumentExists()
		}
		if err := col.checkUnique(d, &s.prof); err != nil {
			return err
		}
		col.Seq++
		d.Seq = col.Seq
		if s.prof.uuidSequence {
			d.UUID = newUUIDv7(now)
		}
		col.Docs[id] = d
		col.indexDoc(d, &s.prof)
		s.changed()
		writeJSON(w, 201, docJSON(col, d, nil))
		return nil
	})

	s.handle("GET "+base+"/{id}", "documents.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		qs, err := parseQueries(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		col, err := s.collForCaller(r, c)
		if err != nil {
			return err
		}
		var sel []string
		for _, q := range qs {
			if q.Method != "select" || len(q.strValues()) != len(q.Values) {
				return errQuery("Only select queries are allowed here")
			}
			sel = append(sel, q.strValues()...)
		}
		d := s.getDoc(col, r.PathValue("id"))
		if d == nil || !canDo(c, col, d, "read") {
			return errDocumentNotFound()
		}
		writeJSON(w, 200, docJSON(col, d, sel))
		return nil
	})

	s.handle("GET "+base, "documents.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		qs, err := parseQueries(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		col, err := s.collForCaller(r, c)
		if err != nil {
			return err
		}
		res, err := runQueries(col, qs, func(d *document) bool { return canDo(c, col, d, "read") }, &s.prof)
		if err != nil {
			return err
		}
		out := make([]map[string]any, 0, len(res.docs))
		for _, d := range res.docs {
			out = append(out, docJSON(col, d, res.sel))
		}
		total := res.total
		if r.URL.Query().Get("total") == "false" {
			total = 0
		}
		writeJSON(w, 200, map[string]any{"total": total, "documents": out})
		return nil
	})

	s.handle("PATCH "+base+"/{id}", "documents.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		if _, ok := body["transactionId"]; ok {
			return errf(400, "general_argument_invalid", "Transactions are not supported by this emulator")
		}
		data, err := dataParam(body)
		if err != nil {
			return err
		}
		if s.prof.realDocumentWrites && len(data) == 0 {
			if v, ok := body["permissions"]; !ok || v == nil {
				return errMissingPayload()
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		perms, given, err := s.permsParam(body, c)
		if err != nil {
			return err
		}
		col, err := s.collForCaller(r, c)
		if err != nil {
			return err
		}
		if s.prof.realDocumentWrites {
			return s.updateDocumentReal(w, r, c, col, data, perms, given)
		}
		d := col.Docs[r.PathValue("id")]
		if d == nil || !canDo(c, col, d, "read") {
			return errDocumentNotFound()
		}
		if !canDo(c, col, d, "update") {
			return errUnauthorized()
		}
		if ts := r.Header.Get("X-Appwrite-Timestamp"); ts != "" {
			t, err := parseTime(ts)
			if err != nil {
				return errf(400, "general_argument_invalid", "Invalid X-Appwrite-Timestamp header value")
			}
			if d.UpdatedAt.Truncate(time.Millisecond).After(t) {
				return errf(409, "document_update_conflict", "Remote document is newer than local.")
			}
		}
		next := map[string]any{}
		for k, v := range d.Data {
			next[k] = v
		}
		if err := applyData(col, next, data, false); err != nil {
			return err
		}
		cand := *d
		cand.Data = next
		if err := col.checkUnique(&cand, &s.prof); err != nil {
			return err
		}
		d.Data = next
		if given {
			d.Permissions = perms
		}
		// $updatedAt strictly increases (by at least a millisecond), so optimistic
		// concurrency through X-Appwrite-Timestamp cannot miss a same-millisecond write.
		now := s.now()
		if min := d.UpdatedAt.Truncate(time.Millisecond).Add(time.Millisecond); now.Before(min) {
			now = min
		}
		d.UpdatedAt = now
		col.indexDoc(d, &s.prof)
		s.changed()
		writeJSON(w, 200, docJSON(col, d, nil))
		return nil
	})

	s.handle("DELETE "+base+"/{id}", "documents.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		col, err := s.collForCaller(r, c)
		if err != nil {
			return err
		}
		var d *document
		if s.prof.realDocumentWrites {
			// Delete.php looks the document up with authorization skipped; only the
			// delete permission is checked (Database::deleteDocument).
			if d = s.getDoc(col, r.PathValue("id")); d == nil {
				return errDocumentNotFound()
			}
		} else if d = col.Docs[r.PathValue("id")]; d == nil || !canDo(c, col, d, "read") {
			return errDocumentNotFound()
		}
		if !canDo(c, col, d, "delete") {
			return errUnauthorized()
		}
		delete(col.Docs, d.ID)
		col.dropDoc(d)
		s.changed()
		w.WriteHeader(204)
		return nil
	})
}

// updateDocumentReal is Update.php + Database::updateDocument on a real engine: the
// document is read with authorization skipped (no read permission needed); an update
// that changes something needs the update permission, one that changes nothing needs the
// read permission and keeps $updatedAt; $updatedAt is the current millisecond, and
// X-Appwrite-Timestamp conflicts only when the stored $updatedAt is strictly later.
func (s *Server) updateDocumentReal(w http.ResponseWriter, r *http.Request, c *caller, col *collection, data map[string]any, perms []string, given bool) error {
	d := s.getDoc(col, r.PathValue("id"))
	if d == nil {
		return errDocumentNotFound()
	}
	next := map[string]any{}
	for k, v := range d.Data {
		next[k] = v
	}
	if err := applyData(col, next, data, false); err != nil {
		return err
	}
	changed := !sameJSON(next, d.Data) || (given && !sameJSON(append([]string{}, perms...), append([]string{}, d.Permissions...)))
	if changed && !canDo(c, col, d, "update") {
		return errUnauthorized()
	}
	if !changed && !canDo(c, col, d, "read") {
		return errUnauthorized()
	}
	if ts := r.Header.Get("X-Appwrite-Timestamp"); ts != "" {
		t, err := parseTime(ts)
		if err != nil {
			return errf(400, "general_argument_invalid", "Invalid X-Appwrite-Timestamp header value")
		}
		if d.UpdatedAt.Truncate(time.Millisecond).After(t) {
			return errf(409, "document_update_conflict", "Remote document is newer than local.")
		}
	}
	if !changed {
		writeJSON(w, 200, docJSON(col, d, nil))
		return nil
	}
	cand := *d
	cand.Data = next
	if err := col.checkUnique(&cand, &s.prof); err != nil {
		return err
	}
	d.Data = next
	if given {
		d.Permissions = perms
	}
	d.UpdatedAt = s.now().Truncate(time.Millisecond)
	col.indexDoc(d, &s.prof)
	s.changed()
	writeJSON(w, 200, docJSON(col, d, nil))
	return nil
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
