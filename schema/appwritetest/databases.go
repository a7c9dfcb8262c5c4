package appwritetest

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/mail"
	"net/url"
	"slices"
	"time"
)

func (s *Server) databaseJSON(db *database) map[string]any {
	return map[string]any{
		"$id": db.ID, "name": db.Name, "$createdAt": fmtTime(db.CreatedAt), "$updatedAt": fmtTime(db.UpdatedAt),
		"enabled": db.Enabled, "type": "legacy", "policies": []any{}, "archives": []any{},
	}
}

func (s *Server) collectionJSON(c *collection) map[string]any {
	attrs := make([]map[string]any, 0, len(c.Attributes))
	for _, a := range c.Attributes {
		attrs = append(attrs, attributeJSON(a))
	}
	idx := make([]map[string]any, 0, len(c.Indexes))
	for _, i := range c.Indexes {
		idx = append(idx, indexJSON(c, i))
	}
	perms := c.Permissions
	if perms == nil {
		perms = []string{}
	}
	return map[string]any{
		"$id": c.ID, "$createdAt": fmtTime(c.CreatedAt), "$updatedAt": fmtTime(c.UpdatedAt),
		"$permissions": perms, "databaseId": c.DatabaseID, "name": c.Name, "enabled": c.Enabled,
		"documentSecurity": c.DocumentSecurity, "attributes": attrs, "indexes": idx,
		"bytesMax": 65535, "bytesUsed": c.bytesUsed(),
	}
}

func (c *collection) bytesUsed() int {
	n := 0
	for _, a := range c.Attributes {
		if a.Type == "string" {
			n += a.Size * 4
		} else {
			n += 8
		}
	}
	return n
}

func attributeJSON(a *attribute) map[string]any {
	m := map[string]any{
		"key": a.Key, "type": a.Type, "status": a.Status, "error": a.Error,
		"required": a.Required, "array": a.Array,
		"$createdAt": fmtTime(a.CreatedAt), "$updatedAt": fmtTime(a.UpdatedAt),
		"default": a.Default,
	}
	switch a.Type {
	case "string":
		if a.Format != "" {
			m["format"] = a.Format
		}
		if a.Format == "enum" {
			m["elements"] = a.Elements
		} else if a.Format == "" {
			m["size"] = a.Size
			m["encrypt"] = a.Encrypt
		}
	case "integer":
		m["min"] = *a.MinInt
		m["max"] = *a.MaxInt
	case "double":
		m["min"] = *a.MinFloat
		m["max"] = *a.MaxFloat
	case "datetime":
		m["format"] = "datetime"
	}
	return m
}

func indexJSON(c *collection, i *index) map[string]any {
	orders := i.Orders
	if orders == nil {
		orders = []string{}
	}
	lengths := i.Lengths
	if lengths == nil {
		lengths = []int{}
	}
	return map[string]any{
		"$id": c.ID + "_" + i.Key, "$createdAt": fmtTime(i.CreatedAt), "$updatedAt": fmtTime(i.UpdatedAt),
		"key": i.Key, "type": i.Type, "status": i.Status, "error": i.Error,
		"attributes": i.Attributes, "lengths": lengths, "orders": orders,
	}
}

// settle flips processing attributes and indexes whose worker delay has passed, as
// Appwrite's database worker does. A unique index over duplicate data fails.
func (s *Server) settle(c *collection) {
	now := s.now()
	for _, a := range c.Attributes {
		if a.Status == "processing" && !now.Before(a.ReadyAt) {
			a.Status = "available"
			a.UpdatedAt = now
			s.changed()
		}
	}
	for _, i := range c.Indexes {
		if i.Status == "processing" && !now.Before(i.ReadyAt) {
			i.Status = "available"
			if i.Type == "unique" && c.hasDuplicates(i, "", &s.prof) {
				i.Status = "failed"
				i.Error = "Duplicate entry found for unique index"
			}
			i.UpdatedAt = now
			s.changed()
		}
	}
}

func (c *collection) attr(key string) *attribute {
	for _, a := range c.Attributes {
		if a.Key == key {
			return a
		}
	}
	return nil
}

func (c *collection) index(key string) *index {
	for _, i := range c.Indexes {
		if i.Key == key {
			return i
		}
	}
	return nil
}

func (s *Server) getDB(id string) (*database, error) {
	db := s.st.Databases[id]
	if db == nil {
		return nil, errDatabaseNotFound()
	}
	return db, nil
}

func (s *Server) getColl(dbID, collID string) (*collection, error) {
	db, err := s.getDB(dbID)
	if err != nil {
		return nil, err
	}
	c := db.Collections[collID]
	if c == nil {
		return nil, errCollectionNotFound()
	}
	s.settle(c)
	return c, nil
}

func (s *Server) routesDatabases() {
	s.handle("POST /v1/databases", "databases.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		raw, _ := str(body, "databaseId")
		id, err := resolveID("databaseId", raw)
		if err != nil {
			return err
		}
		name, _ := str(body, "name")
		enabled, err := boolean(body, "enabled", true)
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.st.Databases[id] != nil {
			return errf(409, "database_already_exists", "Database already exists")
		}
		now := s.now()
		db := &database{ID: id, Name: name, Enabled: enabled, CreatedAt: now, UpdatedAt: now, Collections: map[string]*collection{}}
		s.st.Databases[id] = db
		s.changed()
		writeJSON(w, 201, s.databaseJSON(db))
		return nil
	})
	s.handle("GET /v1/databases", "databases.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		out := []map[string]any{}
		for _, k := range sortedKeys(s.st.Databases) {
			out = append(out, s.databaseJSON(s.st.Databases[k]))
		}
		writeJSON(w, 200, map[string]any{"total": len(out), "databases": out})
		return nil
	})
	s.handle("GET /v1/databases/{db}", "databases.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		db, err := s.getDB(r.PathValue("db"))
		if err != nil {
			return err
		}
		writeJSON(w, 200, s.databaseJSON(db))
		return nil
	})

	s.handle("POST /v1/databases/{db}/collections", "collections.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		raw, _ := str(body, "collectionId")
		id, err := resolveID("collectionId", raw)
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
		ds, err := boolean(body, "documentSecurity", false)
		if err != nil {
			return err
		}
		enabled, err := boolean(body, "enabled", true)
		if err != nil {
			return err
		}
		if v, ok := body["attributes"]; ok && v != nil {
			if arr, _ := v.([]any); len(arr) > 0 {
				return errf(400, "general_argument_invalid", "Inline attributes are not supported by this emulator; create them one by one")
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		db, err := s.getDB(r.PathValue("db"))
		if err != nil {
			return err
		}
		if db.Collections[id] != nil {
			return errf(409, "collection_already_exists", "A collection with the requested ID already exists. Try again with a different ID or use ID.unique() to generate a unique ID.")
		}
		now := s.now()
		col := &collection{ID: id, DatabaseID: db.ID, Name: name, Permissions: expandPermissions(perms),
			DocumentSecurity: ds, Enabled: enabled, Docs: map[string]*document{}, CreatedAt: now, UpdatedAt: now}
		db.Collections[id] = col
		s.changed()
		writeJSON(w, 201, s.collectionJSON(col))
		return nil
	})
	s.handle("GET /v1/databases/{db}/collections", "collections.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		db, err := s.getDB(r.PathValue("db"))
		if err != nil {
			return err
		}
		out := []map[string]any{}
		for _, k := range sortedKeys(db.Collections) {
			col := db.Collections[k]
			s.settle(col)
			out = append(out, s.collectionJSON(col))
		}
		writeJSON(w, 200, map[string]any{"total": len(out), "collections": out})
		return nil
	})
	s.handle("GET /v1/databases/{db}/collections/{coll}", "collections.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		col, err := s.getColl(r.PathValue("db"), r.PathValue("coll"))
		if err != nil {
			return err
		}
		writeJSON(w, 200, s.collectionJSON(col))
		return nil
	})

	s.handle("POST /v1/databases/{db}/collections/{coll}/attributes/{type}", "collections.write", s.createAttribute)
	s.handle("GET /v1/databases/{db}/collections/{coll}/attributes", "collections.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		col, err := s.getColl(r.PathValue("db"), r.PathValue("coll"))
		if err != nil {
			return err
		}
		out := []map[string]any{}
		for _, a := range col.Attributes {
			out = append(out, attributeJSON(a))
		}
		writeJSON(w, 200, map[string]any{"total": len(out), "attributes": out})
		return nil
	})
	s.handle("GET /v1/databases/{db}/collections/{coll}/attributes/{key}", "collections.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		col, err := s.getColl(r.PathValue("db"), r.PathValue("coll"))
		if err != nil {
			return err
		}
		a := col.attr(r.PathValue("key"))
		if a == nil {
			return errAttributeNotFound()
		}
		writeJSON(w, 200, attributeJSON(a))
		return nil
	})

	s.handle("POST /v1/databases/{db}/collections/{coll}/indexes", "collections.write", s.createIndex)
	s.handle("GET /v1/databases/{db}/collections/{coll}/indexes", "collections.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		col, err := s.getColl(r.PathValue("db"), r.PathValue("coll"))
		if err != nil {
			return err
		}
		out := []map[string]any{}
		for _, i := range col.Indexes {
			out = append(out, indexJSON(col, i))
		}
		writeJSON(w, 200, map[string]any{"total": len(out), "indexes": out})
		return nil
	})
	s.handle("GET /v1/databases/{db}/collections/{coll}/indexes/{key}", "collections.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		col, err := s.getColl(r.PathValue("db"), r.PathValue("coll"))
		if err != nil {
			return err
		}
		i := col.index(r.PathValue("key"))
		if i == nil {
			return errIndexNotFound()
		}
		writeJSON(w, 200, indexJSON(col, i))
		return nil
	})
}

var attrKeyRe = customIDRe

func (s *Server) createAttribute(w http.ResponseWriter, r *http.Request, c *caller) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	key, _ := str(body, "key")
	if !attrKeyRe.MatchString(key) {
		return errArgument("key", "Parameter must contain at most 36 chars. Valid chars are a-z, A-Z, 0-9, period, hyphen, and underscore. Can't start with a special char")
	}
	required, err := boolean(body, "required", false)
	if err != nil {
		return err
	}
	array, err := boolean(body, "array", false)
	if err != nil {
		return err
	}
	a := &attribute{Key: key, Required: required, Array: array}
	typ := r.PathValue("type")
	switch typ {
	case "string":
		n, ok, err := intParam(body, "size")
		if err != nil {
			return err
		}
		if !ok || n < 1 || n > 1073741824 {
			return errArgument("size", "Value must be a valid range between 1 and 1,073,741,824")
		}
		a.Type, a.Size = "string", int(n)
		a.Encrypt, err = boolean(body, "encrypt", false)
		if err != nil {
			return err
		}
	case "enum":
		els, ok, err := strList(body, "elements")
		if err != nil {
			return err
		}
		if !ok || len(els) == 0 {
			return errArgument("elements", "Value must a valid array no longer than 100 items")
		}
		a.Type, a.Format, a.Elements = "string", "enum", els
		for _, e := range els {
			if len(e) > a.Size {
				a.Size = len(e)
			}
		}
	case "email", "url", "ip":
		a.Type, a.Format, a.Size = "string", typ, 254
		if typ == "url" {
			a.Size = 2000
		}
	case "integer":
		a.Type = "integer"
		lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
		if v, ok, err := intParam(body, "min"); err != nil {
			return err
		} else if ok {
			lo = v
		}
		if v, ok, err := intParam(body, "max"); err != nil {
			return err
		} else if ok {
			hi = v
		}
		if lo > hi {
			return errf(400, "attribute_value_invalid", "Minimum value must be lesser than maximum value")
		}
		a.MinInt, a.MaxInt = &lo, &hi
	case "float":
		a.Type = "double"
		lo, hi := -math.MaxFloat64, math.MaxFloat64
		if v, ok, err := floatParam(body, "min"); err != nil {
			return err
		} else if ok {
			lo = v
		}
		if v, ok, err := floatParam(body, "max"); err != nil {
			return err
		} else if ok {
			hi = v
		}
		if lo > hi {
			return errf(400, "attribute_value_invalid", "Minimum value must be lesser than maximum value")
		}
		a.MinFloat, a.MaxFloat = &lo, &hi
	case "boolean":
		a.Type = "boolean"
	case "datetime":
		a.Type, a.Format = "datetime", ""
	default:
		return errRoute()
	}
	if dv, ok := body["default"]; ok && dv != nil {
		if required {
			return errf(400, "attribute_default_unsupported", "Cannot set default value for required attribute")
		}
		norm, err := checkValue(a, dv)
		if err != nil {
			return errf(400, "attribute_value_invalid", "Default value is invalid: %s", err)
		}
		a.Default = norm
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	col, err := s.getColl(r.PathValue("db"), r.PathValue("coll"))
	if err != nil {
		return err
	}
	if col.attr(key) != nil {
		return errf(409, "attribute_already_exists", "Attribute with the requested key already exists. Attribute keys must be unique, try again with a different key.")
	}
	if s.prof.rowWidth && mariaRowWidth(append(slices.Clone(col.Attributes), a)) >= mariaRowLimit {
		return errf(400, "attribute_limit_exceeded", "The maximum number or size of attributes for this collection has been reached.")
	}
	now := s.now()
	a.Status, a.ReadyAt, a.CreatedAt, a.UpdatedAt = "processing", now.Add(s.opts.ProcessingDelay), now, now
	col.Attributes = append(col.Attributes, a)
	for _, d := range col.Docs {
		if _, ok := d.Data[key]; !ok {
			d.Data[key] = a.Default
		}
	}
	col.invalidateIndexes() // documents changed in place
	s.changed()
	writeJSON(w, 202, attributeJSON(a))
	return nil
}

func (s *Server) createIndex(w http.ResponseWriter, r *http.Request, c *caller) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	key, _ := str(body, "key")
	if !attrKeyRe.MatchString(key) {
		return errArgument("key", "Parameter must contain at most 36 chars. Valid chars are a-z, A-Z, 0-9, period, hyphen, and underscore. Can't start with a special char")
	}
	typ, _ := str(body, "type")
	switch typ {
	case "key", "unique", "fulltext":
	default:
		return errArgument("type", "Value must be one of (key, fulltext, unique, spatial)")
	}
	attrs, _, err := strList(body, "attributes")
	if err != nil {
		return err
	}
	if len(attrs) == 0 {
		return errArgument("attributes", "Value must a valid array no longer than 100 items")
	}
	orders, _, err := strList(body, "orders")
	if err != nil {
		return err
	}
	for _, o := range orders {
		if o != "ASC" && o != "DESC" {
			return errArgument("orders", "Value must be one of (ASC, DESC)")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	col, err := s.getColl(r.PathValue("db"), r.PathValue("coll"))
	if err != nil {
		return err
	}
	if col.index(key) != nil {
		return errf(409, "index_already_exists", "Index with the requested key already exists. Try again with a different key.")
	}
	for _, ak := range attrs {
		if isSystemAttr(ak) {
			continue
		}
		a := col.attr(ak)
		if a == nil {
			return errf(400, "attribute_unknown", "Unknown attribute: %s. Verify the attribute name or create the attribute.", ak)
		}
		if a.Status != "available" {
			return errf(400, "attribute_not_available", "The requested attribute is not yet available. Please try again later.")
		}
	}
	now := s.now()
	i := &index{Key: key, Type: typ, Attributes: attrs, Orders: orders, Status: "processing",
		ReadyAt: now.Add(s.opts.ProcessingDelay), CreatedAt: now, UpdatedAt: now}
	if l, ok := body["lengths"].([]any); ok {
		for _, x := range l {
			if n, ok := x.(json.Number); ok {
				v, _ := n.Int64()
				i.Lengths = append(i.Lengths, int(v))
			}
		}
	}
	col.Indexes = append(col.Indexes, i)
	s.changed()
	writeJSON(w, 202, indexJSON(col, i))
	return nil
}

func isSystemAttr(k string) bool {
	switch k {
	case "$id", "$createdAt", "$updatedAt", "$sequence":
		return true
	}
	return false
}

// hasDuplicates reports whether a unique index would be violated; skip excludes one doc.
func (c *collection) hasDuplicates(i *index, skip string, p *profile) bool {
	seen := map[string]bool{}
	for _, d := range c.sortedDocs() {
		if d.ID == skip {
			continue
		}
		k, ok := c.uniqueKey(i, d, p)
		if !ok {
			continue
		}
		if seen[k] {
			return true
		}
		seen[k] = true
	}
	return false
}

func (d *document) get(k string) any {
	switch k {
	case "$id":
		return d.ID
	case "$sequence":
		return d.seqKey()
	case "$createdAt":
		return fmtTime(d.CreatedAt)
	case "$updatedAt":
		return fmtTime(d.UpdatedAt)
	}
	return d.Data[k]
}

// checkValue validates one attribute value and returns it normalised.
func checkValue(a *attribute, v any) (any, error) {
	if a.Array {
		arr, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("attribute %q must be an array", a.Key)
		}
		out := make([]any, len(arr))
		for i, e := range arr {
			n, err := checkScalar(a, e)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	}
	return checkScalar(a, v)
}

func checkScalar(a *attribute, v any) (any, error) {
	switch a.Type {
	case "string":
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("attribute %q has invalid type. Value must be a valid string and no longer than %d chars", a.Key, a.Size)
		}
		switch a.Format {
		case "enum":
			for _, e := range a.Elements {
				if e == s {
					return s, nil
				}
			}
			return nil, fmt.Errorf("attribute %q has invalid format. Value must be one of (%s)", a.Key, joinStr(a.Elements))
		case "email":
			if _, err := mail.ParseAddress(s); err != nil {
				return nil, fmt.Errorf("attribute %q has invalid format. Value must be a valid email address", a.Key)
			}
		case "url":
			if u, err := url.Parse(s); err != nil || u.Scheme == "" || u.Host == "" {
				return nil, fmt.Errorf("attribute %q has invalid format. Value must be a valid URL", a.Key)
			}
		}
		if n := len([]rune(s)); n > a.Size {
			return nil, fmt.Errorf("attribute %q has invalid type. Value must be a valid string and no longer than %d chars", a.Key, a.Size)
		}
		return s, nil
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			if i, isInt := v.(int64); isInt {
				n = json.Number(fmt.Sprint(i))
			} else {
				return nil, fmt.Errorf("attribute %q has invalid type. Value must be a valid integer", a.Key)
			}
		}
		i, err := n.Int64()
		if err != nil {
			return nil, fmt.Errorf("attribute %q has invalid type. Value must be a valid integer", a.Key)
		}
		if i < *a.MinInt || i > *a.MaxInt {
			return nil, fmt.Errorf("attribute %q has invalid format. Value must be a valid range between %d and %d", a.Key, *a.MinInt, *a.MaxInt)
		}
		return i, nil
	case "double":
		var f float64
		switch x := v.(type) {
		case json.Number:
			var err error
			if f, err = x.Float64(); err != nil {
				return nil, fmt.Errorf("attribute %q has invalid type. Value must be a valid float", a.Key)
			}
		case float64:
			f = x
		default:
			return nil, fmt.Errorf("attribute %q has invalid type. Value must be a valid float", a.Key)
		}
		if f < *a.MinFloat || f > *a.MaxFloat {
			return nil, fmt.Errorf("attribute %q has invalid format. Value must be a valid range", a.Key)
		}
		return f, nil
	case "boolean":
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("attribute %q has invalid type. Value must be a valid boolean", a.Key)
		}
		return b, nil
	case "datetime":
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("attribute %q has invalid type. Value must be valid date", a.Key)
		}
		t, err := parseTime(s)
		if err != nil {
			return nil, fmt.Errorf("attribute %q has invalid type. Value must be valid date", a.Key)
		}
		return fmtTime(t), nil
	}
	return nil, fmt.Errorf("attribute %q has an unsupported type", a.Key)
}

func parseTime(s string) (time.Time, error) {
	for _, f := range []string{time.RFC3339Nano, timeFormat, "2006-01-02T15:04:05.000Z07:00", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.Parse(f, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("invalid date %q", s)
}

func joinStr(xs []string) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

// mariaRowLimit is utopia-php/database 6.0.0's getDocumentSizeLimit() on the SQL adapters
// (src/Database/Adapter/SQL.php:1145-1148); Mongo's is 0, no limit (Mongo.php:3424-3427).
const mariaRowLimit = 65535

// mariaRowWidth is SQL.php:1159-1260 getAttributeWidth: 1,067 bytes of system columns; an
// array 20 (JSON); a string longer than getMaxVarcharLength() = 16,381 characters
// (SQL.php:2309-2312) a TEXT pointer of 20, else VARCHAR at 4 bytes a character plus 1
// (up to 255) or 2; an integer 8 when it needs 64 bits, else 4; a double 8; a boolean 1;
// a datetime 7. Database::checkAttribute refuses the attribute at >= the limit
// (Database.php:3242-3259), which Appwrite answers 400 attribute_limit_exceeded.
func mariaRowWidth(attrs []*attribute) int {
	total := 1067
	for _, a := range attrs {
		switch {
		case a.Array:
			total += 20
		case a.Type == "string" && a.Size > 16381:
			total += 20
		case a.Type == "string" && a.Size > 255:
			total += a.Size*4 + 2
		case a.Type == "string":
			total += a.Size*4 + 1
		case a.Type == "integer":
			if (a.MaxInt != nil && *a.MaxInt > math.MaxInt32) || (a.MinInt != nil && *a.MinInt < math.MinInt32) {
				total += 8
			} else {
				total += 4
			}
		case a.Type == "double":
			total += 8
		case a.Type == "boolean":
			total += 1
		case a.Type == "datetime":
			total += 7
		}
	}
	return total
}
