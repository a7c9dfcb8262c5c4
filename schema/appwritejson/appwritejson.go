// Package appwritejson writes the Appwrite CLI project file (appwrite.json) from the data
// model and the function registry, and validates such a file against the key sets of the
// 1.9-era CLI (≥ 17.0.0), whose Zod schemas are strict: an unknown key is an error, and
// functions take buildSpecification/runtimeSpecification, never the older specification.
package appwritejson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"privateassistant/schema"
)

// Function is one function entry.
type Function struct {
	ID         string   `json:"$id"`
	Name       string   `json:"name"`
	Runtime    string   `json:"runtime"`
	Path       string   `json:"path"`
	Entrypoint string   `json:"entrypoint"`
	Commands   string   `json:"commands"`
	Execute    []string `json:"execute"`
	Events     []string `json:"events"`
	Scopes     []string `json:"scopes"`
	Schedule   string   `json:"schedule"`
	Timeout    int      `json:"timeout"`
	Enabled    bool     `json:"enabled"`
	Logging    bool     `json:"logging"`
	// BuildSpecification/RuntimeSpecification name the resource sizes, e.g. "s-1vcpu-512mb".
	BuildSpecification   string `json:"buildSpecification,omitempty"`
	RuntimeSpecification string `json:"runtimeSpecification,omitempty"`
}

// Project is what goes into the file besides the data model.
type Project struct {
	ProjectID   string
	ProjectName string
	Functions   []Function
}

// Generate renders appwrite.json (two-space indented, trailing newline).
func Generate(m schema.Model, p Project) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	type attr map[string]any
	var colls []map[string]any
	for _, c := range m.Collections {
		attrs := []attr{}
		for _, a := range c.Attributes {
			e := attr{"key": a.Key, "required": a.Required, "array": a.Array}
			switch a.Type {
			case schema.TypeString:
				e["type"], e["size"] = "string", a.Size
			case schema.TypeEnum:
				e["type"], e["format"], e["elements"] = "string", "enum", a.Elements
				size := 0
				for _, x := range a.Elements {
					size = max(size, len(x))
				}
				e["size"] = size
			case schema.TypeInteger:
				e["type"] = "integer"
				lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
				if a.Min != nil {
					lo = *a.Min
				}
				if a.Max != nil {
					hi = *a.Max
				}
				e["min"], e["max"] = lo, hi
			case schema.TypeFloat:
				e["type"] = "double"
			case schema.TypeBoolean:
				e["type"] = "boolean"
			case schema.TypeDatetime:
				e["type"], e["format"] = "datetime", ""
			}
			e["default"] = a.Default
			attrs = append(attrs, e)
		}
		idx := []map[string]any{}
		for _, i := range c.Indexes {
			orders := i.Orders
			if len(orders) == 0 {
				orders = make([]string, len(i.Attributes))
				for k := range orders {
					orders[k] = "ASC"
				}
			}
			idx = append(idx, map[string]any{"key": i.Key, "type": string(i.Type), "attributes": i.Attributes, "orders": orders})
		}
		perms := c.Permissions
		if perms == nil {
			perms = []string{}
		}
		colls = append(colls, map[string]any{
			"$id": c.ID, "databaseId": m.DatabaseID, "name": c.Name, "enabled": true,
			"documentSecurity": c.DocumentSecurity, "$permissions": perms,
			"attributes": attrs, "indexes": idx,
		})
	}
	var buckets []map[string]any
	for _, b := range m.Buckets {
		perms := b.Permissions
		if perms == nil {
			perms = []string{}
		}
		exts := b.AllowedFileExtensions
		if exts == nil {
			exts = []string{}
		}
		buckets = append(buckets, map[string]any{
			"$id": b.ID, "name": b.Name, "$permissions": perms, "fileSecurity": b.FileSecurity,
			"enabled": b.Enabled, "maximumFileSize": b.MaximumFileSize, "allowedFileExtensions": exts,
			"compression": b.Compression, "encryption": b.Encryption, "antivirus": b.Antivirus,
		})
	}
	fns := p.Functions
	if fns == nil {
		fns = []Function{}
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].ID < fns[j].ID })
	doc := map[string]any{
		"projectId":   p.ProjectID,
		"projectName": p.ProjectName,
		"databases":   []map[string]any{{"$id": m.DatabaseID, "name": m.DatabaseName, "enabled": true}},
		"collections": colls,
		"buckets":     buckets,
		"functions":   fns,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := Validate(buf.Bytes()); err != nil {
		return nil, fmt.Errorf("generated file is invalid: %w", err)
	}
	return buf.Bytes(), nil
}

// Key sets of the CLI's Zod schemas (lib/commands/config.ts, CLI 23.0.0 / 25.1.0).
var (
	topKeys = keys("projectId", "organizationId", "projectName", "endpoint", "includes", "settings",
		"functions", "sites", "databases", "collections", "tablesDB", "tables", "topics", "teams",
		"buckets", "webhooks", "messages")
	functionKeys = keys("$id", "name", "runtime", "path", "execute", "enabled", "logging",
		"buildSpecification", "runtimeSpecification", "deploymentRetention", "scopes", "events",
		"schedule", "timeout", "entrypoint", "commands", "vars", "ignore")
	databaseKeys   = keys("$id", "name", "enabled")
	collectionKeys = keys("$id", "databaseId", "name", "$permissions", "enabled", "documentSecurity", "attributes", "indexes")
	attributeKeys  = keys("key", "type", "required", "array", "size", "default", "min", "max", "format",
		"elements", "relatedCollection", "relationType", "twoWay", "twoWayKey", "onDelete", "side", "encrypt", "previousKey")
	attributeTypes = keys("string", "text", "varchar", "mediumtext", "longtext", "integer", "bigint", "double",
		"boolean", "datetime", "relationship", "linestring", "point", "polygon")
	indexKeys  = keys("key", "type", "attributes", "status", "orders")
	bucketKeys = keys("$id", "name", "$permissions", "fileSecurity", "enabled", "maximumFileSize",
		"allowedFileExtensions", "compression", "encryption", "antivirus")
)

func keys(xs ...string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// Validate checks an appwrite.json against the strict CLI schema: unknown keys, missing
// required keys and a few value rules are errors, each naming its path.
func Validate(b []byte) error {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("appwrite.json: %w", err)
	}
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	strict := func(path string, obj map[string]any, allowed map[string]bool, required ...string) {
		for k := range obj {
			if !allowed[k] {
				if k == "specification" {
					bad("%s: unknown key %q (1.9-era CLIs take buildSpecification and runtimeSpecification)", path, k)
				} else {
					bad("%s: unknown key %q", path, k)
				}
			}
		}
		for _, k := range required {
			if _, ok := obj[k]; !ok {
				bad("%s: missing required key %q", path, k)
			}
		}
	}
	items := func(path string, v any) []map[string]any {
		if v == nil {
			return nil
		}
		arr, ok := v.([]any)
		if !ok {
			bad("%s: must be an array", path)
			return nil
		}
		out := []map[string]any{}
		for i, e := range arr {
			m, ok := e.(map[string]any)
			if !ok {
				bad("%s[%d]: must be an object", path, i)
				continue
			}
			out = append(out, m)
		}
		return out
	}
	strict("appwrite.json", doc, topKeys, "projectId")
	for i, f := range items("functions", doc["functions"]) {
		p := fmt.Sprintf("functions[%d]", i)
		strict(p, f, functionKeys, "$id", "name", "runtime")
		if rt, _ := f["runtime"].(string); rt != "" && !strings.HasPrefix(rt, "go-1.2") && !strings.Contains(rt, "-") {
			bad("%s: runtime %q is not a runtime key", p, rt)
		}
	}
	for i, d := range items("databases", doc["databases"]) {
		strict(fmt.Sprintf("databases[%d]", i), d, databaseKeys, "$id", "name")
	}
	for i, c := range items("collections", doc["collections"]) {
		p := fmt.Sprintf("collections[%d]", i)
		strict(p, c, collectionKeys, "$id", "databaseId", "name")
		for j, a := range items(p+".attributes", c["attributes"]) {
			ap := fmt.Sprintf("%s.attributes[%d]", p, j)
			strict(ap, a, attributeKeys, "key", "type")
			typ, _ := a["type"].(string)
			if !attributeTypes[typ] {
				bad("%s: type %q is not an attribute type", ap, typ)
			}
			if (typ == "string" || typ == "varchar") && a["size"] == nil {
				bad("%s: %s attributes need a size", ap, typ)
			}
			if req, _ := a["required"].(bool); req && a["default"] != nil {
				bad("%s: default must be null when required", ap)
			}
		}
		for j, ix := range items(p+".indexes", c["indexes"]) {
			strict(fmt.Sprintf("%s.indexes[%d]", p, j), ix, indexKeys, "key", "type", "attributes")
		}
	}
	for i, b := range items("buckets", doc["buckets"]) {
		strict(fmt.Sprintf("buckets[%d]", i), b, bucketKeys, "$id", "name")
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("appwrite.json: %s", strings.Join(errs, "; "))
	}
	return nil
}
