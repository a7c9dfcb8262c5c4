package provision

import (
	"context"
	"fmt"
	"time"

	"github.com/appwrite/sdk-for-go/databases"

	"privateassistant/schema"
)

// apply creates what is missing, in dependency order. Existing definitions were already
// compared by plan (no drift), so they are left exactly as they are.
func (p *provisioner) apply(ctx context.Context) error {
	m := p.model
	log := func(format string, args ...any) { fmt.Fprintf(p.cfg.Progress, format+"\n", args...) }
	if _, err := p.db.Get(m.DatabaseID); isNotFound(err) {
		log("create database %s", m.DatabaseID)
		if _, err := p.db.Create(m.DatabaseID, m.DatabaseName); err != nil {
			return fmt.Errorf("create database %s: %w", m.DatabaseID, describe(err))
		}
	} else if err != nil {
		return describe(err)
	}
	for _, c := range m.Collections {
		if err := ctx.Err(); err != nil {
			return err
		}
		got, err := p.db.GetCollection(m.DatabaseID, c.ID)
		if isNotFound(err) {
			log("create collection %s", c.ID)
			got, err = p.db.CreateCollection(m.DatabaseID, c.ID, c.Name,
				p.db.WithCreateCollectionPermissions(orEmpty(c.Permissions)),
				p.db.WithCreateCollectionDocumentSecurity(c.DocumentSecurity),
				p.db.WithCreateCollectionEnabled(true))
		}
		if err != nil {
			return fmt.Errorf("collection %s: %w", c.ID, describe(err))
		}
		have := map[string]bool{}
		for _, a := range got.Attributes {
			if k, _ := a["key"].(string); k != "" {
				have[k] = true
			}
		}
		for _, a := range c.Attributes {
			if have[a.Key] {
				continue
			}
			log("create attribute %s.%s %s", c.ID, a.Key, attrSummary(a))
			if err := p.createAttribute(m.DatabaseID, c.ID, a); err != nil {
				return fmt.Errorf("attribute %s.%s: %w", c.ID, a.Key, describe(err))
			}
		}
		if err := p.waitAvailable(ctx, c.ID, false); err != nil {
			return err
		}
		haveIdx := map[string]bool{}
		for _, i := range got.Indexes {
			haveIdx[i.Key] = true
		}
		for _, i := range c.Indexes {
			if haveIdx[i.Key] {
				continue
			}
			log("create index %s.%s %s", c.ID, i.Key, i.Type)
			var err error
			if len(i.Orders) > 0 {
				_, err = p.db.CreateIndex(m.DatabaseID, c.ID, i.Key, string(i.Type), i.Attributes, p.db.WithCreateIndexOrders(i.Orders))
			} else {
				_, err = p.db.CreateIndex(m.DatabaseID, c.ID, i.Key, string(i.Type), i.Attributes)
			}
			if err != nil {
				return fmt.Errorf("index %s.%s: %w", c.ID, i.Key, describe(err))
			}
		}
		if err := p.waitAvailable(ctx, c.ID, true); err != nil {
			return err
		}
	}
	for _, b := range m.Buckets {
		if _, err := p.st.GetBucket(b.ID); err == nil {
			continue
		} else if !isNotFound(err) {
			return describe(err)
		}
		log("create bucket %s", b.ID)
		_, err := p.st.CreateBucket(b.ID, b.Name,
			p.st.WithCreateBucketPermissions(orEmpty(b.Permissions)),
			p.st.WithCreateBucketFileSecurity(b.FileSecurity),
			p.st.WithCreateBucketEnabled(b.Enabled),
			p.st.WithCreateBucketMaximumFileSize(int(b.MaximumFileSize)),
			p.st.WithCreateBucketAllowedFileExtensions(orEmpty(b.AllowedFileExtensions)),
			p.st.WithCreateBucketCompression(b.Compression),
			p.st.WithCreateBucketEncryption(b.Encryption),
			p.st.WithCreateBucketAntivirus(b.Antivirus))
		if err != nil {
			return fmt.Errorf("bucket %s: %w", b.ID, describe(err))
		}
	}
	log("schema is complete")
	return nil
}

func (p *provisioner) createAttribute(db, coll string, a schema.Attribute) error {
	d := p.db
	var err error
	switch a.Type {
	case schema.TypeString:
		if a.Default != nil {
			_, err = d.CreateStringAttribute(db, coll, a.Key, a.Size, a.Required, d.WithCreateStringAttributeArray(a.Array), d.WithCreateStringAttributeDefault(a.Default.(string)))
		} else {
			_, err = d.CreateStringAttribute(db, coll, a.Key, a.Size, a.Required, d.WithCreateStringAttributeArray(a.Array))
		}
	case schema.TypeEnum:
		if a.Default != nil {
			_, err = d.CreateEnumAttribute(db, coll, a.Key, a.Elements, a.Required, d.WithCreateEnumAttributeArray(a.Array), d.WithCreateEnumAttributeDefault(a.Default.(string)))
		} else {
			_, err = d.CreateEnumAttribute(db, coll, a.Key, a.Elements, a.Required, d.WithCreateEnumAttributeArray(a.Array))
		}
	case schema.TypeInteger:
		opts := []databases.CreateIntegerAttributeOption{d.WithCreateIntegerAttributeArray(a.Array)}
		if a.Min != nil {
			opts = append(opts, d.WithCreateIntegerAttributeMin(int(*a.Min)))
		}
		if a.Max != nil {
			opts = append(opts, d.WithCreateIntegerAttributeMax(int(*a.Max)))
		}
		if a.Default != nil {
			opts = append(opts, d.WithCreateIntegerAttributeDefault(a.Default.(int)))
		}
		_, err = d.CreateIntegerAttribute(db, coll, a.Key, a.Required, opts...)
	case schema.TypeFloat:
		_, err = d.CreateFloatAttribute(db, coll, a.Key, a.Required, d.WithCreateFloatAttributeArray(a.Array))
	case schema.TypeBoolean:
		if a.Default != nil {
			_, err = d.CreateBooleanAttribute(db, coll, a.Key, a.Required, d.WithCreateBooleanAttributeArray(a.Array), d.WithCreateBooleanAttributeDefault(a.Default.(bool)))
		} else {
			_, err = d.CreateBooleanAttribute(db, coll, a.Key, a.Required, d.WithCreateBooleanAttributeArray(a.Array))
		}
	case schema.TypeDatetime:
		_, err = d.CreateDatetimeAttribute(db, coll, a.Key, a.Required, d.WithCreateDatetimeAttributeArray(a.Array))
	default:
		return fmt.Errorf("unsupported attribute type %s", a.Type)
	}
	return err
}

// waitAvailable polls a collection until its attributes (or, with indexes, its indexes)
// are all available, showing progress. failed/stuck is an error; so is the timeout.
func (p *provisioner) waitAvailable(ctx context.Context, coll string, indexes bool) error {
	deadline := time.Now().Add(p.cfg.WaitTimeout)
	what := "attributes"
	if indexes {
		what = "indexes"
	}
	shown := false
	for {
		got, err := p.db.GetCollection(p.model.DatabaseID, coll)
		if err != nil {
			return fmt.Errorf("collection %s: %w", coll, describe(err))
		}
		pending := []string{}
		if indexes {
			for _, i := range got.Indexes {
				switch i.Status {
				case "available":
				case "failed", "stuck":
					return fmt.Errorf("index %s.%s is %s: %s", coll, i.Key, i.Status, i.Error)
				default:
					pending = append(pending, i.Key)
				}
			}
		} else {
			for _, a := range got.Attributes {
				st, _ := a["status"].(string)
				switch st {
				case "available":
				case "failed", "stuck":
					return fmt.Errorf("attribute %s.%v is %s: %v", coll, a["key"], st, a["error"])
				default:
					pending = append(pending, fmt.Sprint(a["key"]))
				}
			}
		}
		if len(pending) == 0 {
			return nil
		}
		if !shown {
			fmt.Fprintf(p.cfg.Progress, "waiting for %d %s of %s to become available: %v\n", len(pending), what, coll, pending)
			shown = true
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s of %s still processing after %s: %v", what, coll, p.cfg.WaitTimeout, pending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(p.cfg.PollInterval):
		}
	}
}
