package settings

import (
	"context"
	"strings"

	"privateassistant/fault"
	"privateassistant/schema"
)

// Admin-chosen ids (harness profiles, model routes) keep the case they were registered
// with, but two ids that differ only in case are refused: Appwrite 1.9.6 treats document
// ids case-insensitively on every engine (unique regardless of case on MongoDB and
// MariaDB), and on MariaDB string equality ignores case too, while on MongoDB it does
// not — so "Local" next to "local" would be one profile on one engine and two on the
// other (schema/appwritetest/doc.go, "Both engines" and "MariaDB profile"). The check
// reads every id (admin collections are small) and compares them in Go, so it answers
// the same on every engine; the revision document ids (runconfig.RevisionDocID, lower-
// case) make a concurrent registration of a case twin fail as taken as well.

// caseTwin returns an existing id among ids that equals id but for case ("" if none).
func caseTwin(id string, ids []string) string {
	for _, x := range ids {
		if x != id && strings.EqualFold(x, id) {
			return x
		}
	}
	return ""
}

func idCaseConflict(kind, id, existing string) error {
	return fault.Errorf(fault.Conflict, "id_case_conflict",
		"%s id %q differs only in case from the existing %q; ids are case-insensitive in Appwrite: use %q or another id", kind, id, existing, existing).
		With("existingId", existing)
}

func harnessIDs(ctx context.Context, st *schema.Store) ([]string, error) {
	all, err := schema.For[schema.HarnessProfile](st, schema.CollHarnessProfiles).All(ctx, schema.ListQuery{})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(all))
	for _, p := range all {
		ids = append(ids, p.ProfileID)
	}
	return ids, nil
}

func routeIDs(ctx context.Context, st *schema.Store) ([]string, error) {
	all, err := schema.For[schema.ModelRoute](st, schema.CollModelRoutes).All(ctx, schema.ListQuery{})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(all))
	for _, r := range all {
		ids = append(ids, r.RouteID)
	}
	return ids, nil
}
