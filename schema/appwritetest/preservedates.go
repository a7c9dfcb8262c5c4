package appwritetest

import "time"

// preserveDates applies $createdAt and $updatedAt given inside a document's data on
// create, as Appwrite 1.9.6 does for an API key or a privileged user
// (Databases/Collections/Documents/Create.php runs createDocument under
// withPreserveDates, and Documents/Action.php removes those two only for other callers):
// a restore keeps each record's timestamps. Other callers' values are ignored.
func preserveDates(c *caller, d *document, data map[string]any) error {
	if c.kind != keyCaller {
		return nil
	}
	for k, dst := range map[string]*time.Time{"$createdAt": &d.CreatedAt, "$updatedAt": &d.UpdatedAt} {
		v, ok := data[k]
		if !ok || v == nil {
			continue
		}
		s, _ := v.(string)
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return errInvalidStructure("Invalid document structure: Attribute \"%s\" has invalid format. Value must be valid date between 0000-01-01 00:00:00 and 9999-12-31 23:59:59.", k)
		}
		*dst = t.UTC()
	}
	return nil
}
