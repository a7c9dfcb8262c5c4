package runconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"privateassistant/schema"
)

// Hold refuses route revision r under the live release relID while that release's
// evidence has not passed (issue 33 gap 2: nothing is live without evidence). Promotions
// need passing evidence, so only the bootstrap's release 1 is ever live without it: it is
// checked like a first candidate (every route it names serves something new), and until
// its evidence clears a route, the roles on that route answer ErrUnchecked — "being
// checked" before the first evidence, "waiting for its GPU qualification" after. A route
// its evidence passed ("passed: …"), found needing no qualification ("not needed: …") or
// that no gate checks here ("not checked: …") is served. A route revision with a passing
// qualification of its own needs no read at all.
func Hold(ctx context.Context, st *schema.Store, relID string, r *schema.ModelRoute) error {
	if CheckQualified(r) == nil {
		return nil
	}
	rel, err := schema.For[schema.Release](st, schema.CollReleases).Get(ctx, relID)
	if errors.Is(err, schema.ErrNotFound) {
		return nil // a pointer from before releases
	}
	if err != nil {
		return err
	}
	if rel.State == schema.ReleaseReady {
		return nil
	}
	if rel.Evidence == nil {
		return fmt.Errorf("%w: configuration %d is being checked (route %s revision %d)", ErrUnchecked, rel.Seq, r.RouteID, r.Revision)
	}
	// What settings.Evidence records per route revision.
	var ev struct {
		Routes []struct {
			ID            string `json:"id"`
			Revision      int64  `json:"revision"`
			Qualification string `json:"qualification"`
		} `json:"routes"`
	}
	_ = json.Unmarshal([]byte(*rel.Evidence), &ev)
	for _, re := range ev.Routes {
		if re.ID != r.RouteID || re.Revision != r.Revision {
			continue
		}
		for _, ok := range []string{"passed", "not needed", "not checked"} {
			if strings.HasPrefix(re.Qualification, ok) {
				return nil
			}
		}
		return fmt.Errorf("%w: route %s revision %d is waiting for its GPU qualification (%s)", ErrUnchecked, r.RouteID, r.Revision, re.Qualification)
	}
	return fmt.Errorf("%w: configuration %d is being checked (route %s revision %d)", ErrUnchecked, rel.Seq, r.RouteID, r.Revision)
}
