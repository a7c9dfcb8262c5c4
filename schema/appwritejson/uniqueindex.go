package appwritejson

import (
	"encoding/json"
	"fmt"
	"strings"
)

// MixedTypeIndex is a unique index whose attributes do not all have one type.
type MixedTypeIndex struct {
	Collection string
	Index      string
	Attributes []string
	Types      []string // the type of each attribute, in index order
}

func (m MixedTypeIndex) String() string {
	parts := make([]string, len(m.Attributes))
	for i := range m.Attributes {
		parts[i] = m.Attributes[i] + ":" + m.Types[i]
	}
	return fmt.Sprintf("%s.%s(%s)", m.Collection, m.Index, strings.Join(parts, ", "))
}

// MixedTypeUniqueIndexes reports every unique index in an appwrite.json whose attributes
// have different types. Appwrite 1.9.6 on MongoDB does not enforce such an index: the
// Mongo adapter of utopia-php/database 6.0.0 gives every indexed attribute a partial
// filter requiring a BSON string (see schema/appwritetest/doc.go), so a document whose
// non-string attribute is set is never in the index. Uniqueness must come from a
// deterministic document id or a string-typed key instead.
//
// String types (string, varchar, text, mediumtext, longtext; enum, email, url and ip are
// strings with a format) count as one type. System attributes: $id is a string,
// $createdAt and $updatedAt are datetimes, $sequence is "sequence" (an integer on
// MariaDB, a UUIDv7 on MongoDB). An index naming an attribute the collection does not
// declare is an error.
func MixedTypeUniqueIndexes(appwriteJSON []byte) ([]MixedTypeIndex, error) {
	var f struct {
		Collections []struct {
			ID         string `json:"$id"`
			Attributes []struct {
				Key  string `json:"key"`
				Type string `json:"type"`
			} `json:"attributes"`
			Indexes []struct {
				Key        string   `json:"key"`
				Type       string   `json:"type"`
				Attributes []string `json:"attributes"`
			} `json:"indexes"`
		} `json:"collections"`
	}
	if err := json.Unmarshal(appwriteJSON, &f); err != nil {
		return nil, fmt.Errorf("appwrite.json: %w", err)
	}
	var out []MixedTypeIndex
	for _, c := range f.Collections {
		types := map[string]string{"$id": "string", "$createdAt": "datetime", "$updatedAt": "datetime", "$sequence": "sequence"}
		for _, a := range c.Attributes {
			types[a.Key] = typeFamily(a.Type)
		}
		for _, i := range c.Indexes {
			if i.Type != "unique" {
				continue
			}
			m := MixedTypeIndex{Collection: c.ID, Index: i.Key, Attributes: i.Attributes}
			mixed := false
			for _, a := range i.Attributes {
				t, ok := types[a]
				if !ok {
					return nil, fmt.Errorf("appwrite.json: collection %s index %s: unknown attribute %q", c.ID, i.Key, a)
				}
				if len(m.Types) > 0 && t != m.Types[0] {
					mixed = true
				}
				m.Types = append(m.Types, t)
			}
			if mixed {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

func typeFamily(t string) string {
	switch t {
	case "string", "varchar", "text", "mediumtext", "longtext":
		return "string"
	}
	return t
}
