package schema

import (
	"fmt"
	"strings"
)

// AttrType is an attribute kind as the legacy Databases API names it in create calls.
type AttrType string

const (
	TypeString   AttrType = "string"
	TypeInteger  AttrType = "integer"
	TypeFloat    AttrType = "float" // served back as "double"
	TypeBoolean  AttrType = "boolean"
	TypeDatetime AttrType = "datetime"
	TypeEnum     AttrType = "enum" // served back as type "string", format "enum"
)

// Attribute is one declared field of a collection.
type Attribute struct {
	Key      string
	Type     AttrType
	Size     int // strings: maximum characters
	Required bool
	Array    bool
	Default  any      // nil: no default (required attributes never have one)
	Min, Max *int64   // integers
	Elements []string // enums
	// Overflow, on a string attribute, names the attribute that holds the id of the file
	// a longer value is stored in whole (overflow.go); "" for a hard limit.
	Overflow string
}

// IndexType is key, unique or fulltext.
type IndexType string

const (
	IndexKey      IndexType = "key"
	IndexUnique   IndexType = "unique"
	IndexFulltext IndexType = "fulltext"
)

// Index is one declared index.
type Index struct {
	Key        string
	Type       IndexType
	Attributes []string
	Orders     []string // ASC|DESC per attribute; empty means the server default
}

// Collection is one declared collection.
type Collection struct {
	ID   string
	Name string
	// UserVisible collections hold records the owner may read: each such record is
	// created with exactly read("user:<owner>"). Other collections are server only: their
	// documents carry no permissions at all.
	UserVisible bool
	// Permissions are collection-level grants. None of ours grants anything broad.
	Permissions      []string
	DocumentSecurity bool
	Attributes       []Attribute
	Indexes          []Index
}

// Attr returns the attribute named key, or nil.
func (c Collection) Attr(key string) *Attribute {
	for i := range c.Attributes {
		if c.Attributes[i].Key == key {
			return &c.Attributes[i]
		}
	}
	return nil
}

// Bucket is a Storage bucket definition.
type Bucket struct {
	ID                    string
	Name                  string
	Permissions           []string
	FileSecurity          bool
	Enabled               bool
	MaximumFileSize       int64
	AllowedFileExtensions []string
	Compression           string
	Encryption            bool
	Antivirus             bool
}

// Model is the complete data model: one database, its collections and the bucket.
type Model struct {
	DatabaseID   string
	DatabaseName string
	Collections  []Collection
	Buckets      []Bucket
}

// Collection returns the collection with id, or panics: ids are compile-time facts.
func (m Model) Collection(id string) Collection {
	for _, c := range m.Collections {
		if c.ID == id {
			return c
		}
	}
	panic("schema: unknown collection " + id)
}

// Validate checks the model for mistakes a server would reject later: duplicate keys,
// indexes over unknown attributes, defaults on required attributes, broad permissions.
func (m Model) Validate() error {
	seen := map[string]bool{}
	for _, c := range m.Collections {
		if seen[c.ID] {
			return fmt.Errorf("collection %s declared twice", c.ID)
		}
		seen[c.ID] = true
		for _, p := range c.Permissions {
			if strings.Contains(p, `"any"`) || strings.Contains(p, `"users"`) || strings.Contains(p, `"guests"`) {
				return fmt.Errorf("collection %s: broad permission %s", c.ID, p)
			}
		}
		keys := map[string]bool{}
		for _, a := range c.Attributes {
			if keys[a.Key] {
				return fmt.Errorf("collection %s: attribute %s declared twice", c.ID, a.Key)
			}
			keys[a.Key] = true
			if a.Required && a.Default != nil {
				return fmt.Errorf("collection %s: required attribute %s has a default", c.ID, a.Key)
			}
			if a.Type == TypeString && a.Size <= 0 {
				return fmt.Errorf("collection %s: string attribute %s needs a size", c.ID, a.Key)
			}
			if a.Type == TypeEnum && len(a.Elements) == 0 {
				return fmt.Errorf("collection %s: enum attribute %s needs elements", c.ID, a.Key)
			}
		}
		for _, ix := range c.Indexes {
			for _, k := range ix.Attributes {
				if !keys[k] && !strings.HasPrefix(k, "$") {
					return fmt.Errorf("collection %s: index %s covers unknown attribute %s", c.ID, ix.Key, k)
				}
			}
			if len(ix.Orders) != 0 && len(ix.Orders) != len(ix.Attributes) {
				return fmt.Errorf("collection %s: index %s orders do not match attributes", c.ID, ix.Key)
			}
		}
	}
	for _, b := range m.Buckets {
		for _, p := range b.Permissions {
			// A bucket grants at most create, to a label: reading a file is granted per file.
			if !strings.HasPrefix(p, `create("label:`) {
				return fmt.Errorf("bucket %s: permission %s grants more than create to a label", b.ID, p)
			}
		}
		if !b.FileSecurity {
			return fmt.Errorf("bucket %s: file security must be on", b.ID)
		}
	}
	return nil
}
