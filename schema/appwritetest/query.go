package appwritetest

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
)

// appQuery is one element of queries[]: {"method":..,"attribute":..,"values":[..]}.
type appQuery struct {
	Method    string `json:"method"`
	Attribute string `json:"attribute"`
	Values    []any  `json:"values"`
}

func (q appQuery) strValues() []string {
	out := []string{}
	for _, v := range q.Values {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

const maxQueries = 100

func parseQueries(r *http.Request) ([]appQuery, error) {
	raw := r.URL.Query()["queries[]"]
	if len(raw) > maxQueries {
		return nil, errArgument("queries", "Value must a valid array no longer than %d items", maxQueries)
	}
	out := make([]appQuery, 0, len(raw))
	for _, s := range raw {
		q, err := parseQuery(s)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

func parseQuery(s string) (appQuery, error) {
	var q appQuery
	if len(s) > 4096 {
		return q, errQuery("Query too long")
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&q); err != nil || q.Method == "" {
		return q, errQuery("Invalid query: %s", s)
	}
	if len(q.Values) > 500 {
		return q, errQuery("Query on attribute has greater than 500 values: %s", q.Attribute)
	}
	return q, nil
}

type queryResult struct {
	docs  []*document
	total int
	sel   []string
}

type orderBy struct {
	attr string
	desc bool
}

// runQueries evaluates filters, ordering, cursors, offset and limit the way
// utopia-php/database does for the legacy API, on the engine p. visible filters by
// permission.
func runQueries(col *collection, qs []appQuery, visible func(*document) bool, p *profile) (*queryResult, error) {
	var filters []appQuery
	var orders []orderBy
	// Like Query::groupByType, the first limit, offset and cursor win; later ones are ignored.
	limit, offset := 25, 0
	limitSet, offsetSet := false, false
	var cursor *appQuery
	res := &queryResult{}
	for i := range qs {
		q := qs[i]
		switch q.Method {
		case "limit":
			n, err := intValue(q)
			if err != nil || n < 0 {
				return nil, errQuery("Invalid limit: Value must be a valid range between 0 and %d", math.MaxInt64)
			}
			if !limitSet {
				limit, limitSet = n, true
			}
		case "offset":
			n, err := intValue(q)
			if err != nil || n < 0 {
				return nil, errQuery("Invalid offset: Value must be a valid range between 0 and 5,000")
			}
			if !offsetSet {
				offset, offsetSet = n, true
			}
		case "cursorAfter", "cursorBefore":
			if cursor == nil {
				cursor = &qs[i]
			}
		case "orderAsc", "orderDesc":
			if err := checkAttr(col, q.Attribute); err != nil {
				return nil, err
			}
			orders = append(orders, orderBy{attr: q.Attribute, desc: q.Method == "orderDesc"})
		case "select":
			if len(q.strValues()) != len(q.Values) || len(q.Values) == 0 {
				return nil, errQuery("Select queries take attribute names as strings")
			}
			res.sel = append(res.sel, q.strValues()...)
		default:
			if err := validateFilter(col, q); err != nil {
				return nil, err
			}
			filters = append(filters, q)
		}
	}

	// Filter first, then sort only what matched: the order below is total (it ends with
	// $sequence, unique in a collection), so it does not depend on the scan's order. An
	// equal filter on a string attribute reads its candidates from an index
	// (uniqueindex.go); every filter is still applied to each.
	var scan []*document
	indexed := false
	for _, f := range filters {
		if scan, indexed = col.equalCandidates(f, p); indexed {
			break
		}
	}
	if !indexed {
		scan = slices.Collect(maps.Values(col.Docs))
	}
	rows := []*document{}
	for _, d := range scan {
		if !visible(d) {
			continue
		}
		ok := true
		for _, f := range filters {
			if !matchFilter(col, d, f, p) {
				ok = false
				break
			}
		}
		if ok {
			rows = append(rows, d)
		}
	}
	// Tie-break on $sequence in the direction of the last order, as the database does.
	tieDesc := len(orders) > 0 && orders[len(orders)-1].desc
	less := func(a, b *document) int {
		for _, o := range orders {
			c := p.compare(a.get(o.attr), b.get(o.attr))
			if o.desc {
				c = -c
			}
			if c != 0 {
				return c
			}
		}
		c := compareValues(a.seqKey(), b.seqKey())
		if tieDesc {
			c = -c
		}
		return c
	}
	sort.SliceStable(rows, func(i, j int) bool { return less(rows[i], rows[j]) < 0 })
	res.total = len(rows)
	if res.total > 5000 {
		res.total = 5000
	}

	if cursor != nil {
		ids := cursor.strValues()
		if len(ids) != 1 {
			return nil, errQuery("Invalid cursor: Cursor must contain exactly one document ID")
		}
		cd, _ := col.lookup(ids[0], p.idFoldLookup)
		if cd == nil {
			return nil, errf(400, "general_cursor_not_found", "Document '%s' for the 'cursor' value not found.", ids[0])
		}
		for _, o := range orders {
			if cd.get(o.attr) == nil {
				return nil, errf(400, "database_query_order_null", "Order attribute '%s' had a null value. Cursor pagination requires all documents order attribute values are non-null.", o.attr)
			}
		}
		var kept []*document
		for _, d := range rows {
			c := less(d, cd)
			if (cursor.Method == "cursorAfter" && c > 0) || (cursor.Method == "cursorBefore" && c < 0) {
				kept = append(kept, d)
			}
		}
		if cursor.Method == "cursorBefore" {
			// The page closest to the cursor, still in the requested order.
			if offset < len(kept) {
				kept = kept[:len(kept)-offset]
			} else {
				kept = nil
			}
			offset = 0
			if len(kept) > limit {
				kept = kept[len(kept)-limit:]
			}
		}
		rows = kept
	}
	if offset >= len(rows) {
		rows = nil
	} else {
		rows = rows[offset:]
	}
	if len(rows) > limit {
		rows = rows[:limit]
	}
	res.docs = rows
	return res, nil
}

func intValue(q appQuery) (int, error) {
	if len(q.Values) != 1 {
		return 0, fmt.Errorf("one value")
	}
	switch v := q.Values[0].(type) {
	case json.Number:
		n, err := v.Int64()
		if n > math.MaxInt32 {
			n = math.MaxInt32
		}
		return int(n), err
	}
	return 0, fmt.Errorf("not a number")
}

func checkAttr(col *collection, k string) error {
	if isSystemAttr(k) {
		return nil
	}
	a := col.attr(k)
	if a == nil || a.Status != "available" {
		return errQuery("Attribute not found in schema: %s", k)
	}
	return nil
}

func validateFilter(col *collection, q appQuery) error {
	switch q.Method {
	case "and", "or":
		if len(q.Values) < 2 {
			return errQuery("%s queries require at least two queries", q.Method)
		}
		for i, v := range q.Values {
			sub, err := nestedQuery(v)
			if err != nil {
				return err
			}
			q.Values[i] = sub
			if err := validateFilter(col, sub); err != nil {
				return err
			}
		}
		return nil
	case "equal", "notEqual", "lessThan", "lessThanEqual", "greaterThan", "greaterThanEqual",
		"contains", "startsWith", "endsWith", "between", "search":
		if err := checkAttr(col, q.Attribute); err != nil {
			return err
		}
		if len(q.Values) == 0 {
			return errQuery("%s queries require at least one value.", q.Method)
		}
		for _, v := range q.Values {
			switch v.(type) {
			case []any, map[string]any:
				// e.g. sdk-for-go's query.Equal("x", []string{...}) nests the array.
				return errQuery("Query value is invalid for attribute \"%s\"", q.Attribute)
			}
		}
		if q.Method == "between" && len(q.Values) != 2 {
			return errQuery("between queries require exactly two values.")
		}
		if q.Method == "search" {
			ok := false
			for _, i := range col.Indexes {
				if i.Type == "fulltext" && i.Status == "available" && len(i.Attributes) == 1 && i.Attributes[0] == q.Attribute {
					ok = true
				}
			}
			if !ok {
				return errQuery("Searching by attribute \"%s\" requires a fulltext index.", q.Attribute)
			}
		}
		if a := col.attr(q.Attribute); a != nil && a.Type == "datetime" {
			for i, v := range q.Values {
				if s, ok := v.(string); ok {
					if t, err := parseTime(s); err == nil {
						q.Values[i] = fmtTime(t)
					}
				}
			}
		}
		return nil
	case "isNull", "isNotNull":
		return checkAttr(col, q.Attribute)
	}
	return errQuery("Invalid query method: %s", q.Method)
}

func nestedQuery(v any) (appQuery, error) {
	switch x := v.(type) {
	case appQuery:
		return x, nil
	case map[string]any:
		b, _ := json.Marshal(x)
		return parseQuery(string(b))
	case string:
		return parseQuery(x)
	}
	return appQuery{}, errQuery("Invalid nested query")
}

func matchFilter(col *collection, d *document, q appQuery, p *profile) bool {
	switch q.Method {
	case "and":
		for _, v := range q.Values {
			if !matchFilter(col, d, v.(appQuery), p) {
				return false
			}
		}
		return true
	case "or":
		for _, v := range q.Values {
			if matchFilter(col, d, v.(appQuery), p) {
				return true
			}
		}
		return false
	}
	val := d.get(q.Attribute)
	switch q.Method {
	case "isNull":
		return val == nil
	case "isNotNull":
		return val != nil
	}
	if val == nil {
		return q.Method == "notEqual"
	}
	if arr, ok := val.([]any); ok {
		if q.Method == "contains" {
			for _, e := range arr {
				for _, w := range q.Values {
					if p.compare(e, w) == 0 {
						return true
					}
				}
			}
		}
		return false
	}
	switch q.Method {
	case "equal":
		for _, w := range q.Values {
			if p.compare(val, w) == 0 {
				return true
			}
		}
		return false
	case "notEqual":
		for _, w := range q.Values {
			if p.compare(val, w) == 0 {
				return false
			}
		}
		return true
	case "lessThan":
		return p.compare(val, q.Values[0]) < 0
	case "lessThanEqual":
		return p.compare(val, q.Values[0]) <= 0
	case "greaterThan":
		return p.compare(val, q.Values[0]) > 0
	case "greaterThanEqual":
		return p.compare(val, q.Values[0]) >= 0
	case "between":
		return p.compare(val, q.Values[0]) >= 0 && p.compare(val, q.Values[1]) <= 0
	case "contains":
		s, _ := val.(string)
		for _, w := range q.Values {
			if ws, ok := w.(string); ok && p.like(s, ws, strings.Contains, true) {
				return true
			}
		}
		return false
	case "startsWith":
		s, _ := val.(string)
		w, _ := q.Values[0].(string)
		return p.like(s, w, strings.HasPrefix, false)
	case "endsWith":
		s, _ := val.(string)
		w, _ := q.Values[0].(string)
		return p.like(s, w, strings.HasSuffix, false)
	case "search":
		s, _ := val.(string)
		w, _ := q.Values[0].(string)
		return p.search(s, w) // fulltext.go: as each engine matches
	}
	return false
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// compareValues orders two attribute values: nil first, numbers numerically, strings
// lexically (datetimes are stored in one fixed UTC format), false before true.
func compareValues(a, b any) int {
	if a == nil || b == nil {
		switch {
		case a == nil && b == nil:
			return 0
		case a == nil:
			return -1
		}
		return 1
	}
	if ai, ok := a.(int64); ok {
		if bn, ok := b.(json.Number); ok {
			if bi, err := bn.Int64(); err == nil {
				return cmp3(ai, bi)
			}
		}
		if bi, ok := b.(int64); ok {
			return cmp3(ai, bi)
		}
	}
	if af, ok := toFloat(a); ok {
		if bf, ok := toFloat(b); ok {
			return cmp3(af, bf)
		}
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y)
		}
	case bool:
		if y, ok := b.(bool); ok {
			switch {
			case x == y:
				return 0
			case !x:
				return -1
			}
			return 1
		}
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

func cmp3[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
