package appwritetest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/client"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/id"
	"github.com/appwrite/sdk-for-go/models"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/stretchr/testify/require"

	"privateassistant/schema/appwritetest"
)

// recorder captures every response the SDK receives.
type recorder struct {
	mu   sync.Mutex
	seen []recorded
}

type recorded struct {
	method, path string
	status       int
	body         []byte
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		r.mu.Lock()
		r.seen = append(r.seen, recorded{req.Method, strings.TrimPrefix(req.URL.Path, "/v1"), resp.StatusCode, b})
		r.mu.Unlock()
	}
	return resp, nil
}

func (r *recorder) attach(c *client.Client) {
	c.Client.Transport = r
}

// Fields the real 1.9.6 server sends beyond an SDK v1.0.0 model, or omits from one.
// Each entry is a documented server behaviour, not an emulator shortcut.
var (
	userExtra   = []string{"emailCanonical", "emailIsFree", "emailIsDisposable", "emailIsCorporate", "emailIsCanonical"}
	accountMiss = []string{"password", "hash", "hashOptions"} // the Account model has no password fields
	fileExtra   = []string{"sizeActual"}                      // File model field the Go SDK does not declare
)

type shapeRule struct {
	method  string
	path    *regexp.Regexp
	model   any
	extra   []string
	missing []string
	anyKeys bool // documents carry user attributes at the top level
}

func rx(s string) *regexp.Regexp { return regexp.MustCompile("^" + s + "$") }

var shapeRules = []shapeRule{
	{"POST", rx(`/account`), models.User{}, userExtra, accountMiss, false},
	{"GET", rx(`/account`), models.User{}, userExtra, accountMiss, false},
	{"POST", rx(`/account/sessions/email`), models.Session{}, nil, nil, false},
	{"POST", rx(`/account/jwts?`), models.Jwt{}, nil, nil, false},
	{"POST", rx(`/users`), models.User{}, userExtra, nil, false},
	{"GET", rx(`/users/[^/]+`), models.User{}, userExtra, nil, false},
	{"PUT", rx(`/users/[^/]+/labels`), models.User{}, userExtra, nil, false},
	{"POST", rx(`/users/[^/]+/sessions`), models.Session{}, nil, nil, false},
	{"POST", rx(`/users/[^/]+/jwts`), models.Jwt{}, nil, nil, false},
	{"POST", rx(`/databases`), models.Database{}, nil, nil, false},
	{"GET", rx(`/databases`), models.DatabaseList{}, nil, nil, false},
	{"GET", rx(`/databases/[^/]+`), models.Database{}, nil, nil, false},
	{"POST", rx(`/databases/[^/]+/collections`), models.Collection{}, nil, nil, false},
	{"GET", rx(`/databases/[^/]+/collections`), models.CollectionList{}, nil, nil, false},
	{"GET", rx(`/databases/[^/]+/collections/[^/]+`), models.Collection{}, nil, nil, false},
	{"POST", rx(`/databases/[^/]+/collections/[^/]+/attributes/string`), models.AttributeString{}, nil, []string{"format"}, false},
	{"POST", rx(`/databases/[^/]+/collections/[^/]+/attributes/integer`), models.AttributeInteger{}, nil, nil, false},
	{"POST", rx(`/databases/[^/]+/collections/[^/]+/attributes/float`), models.AttributeFloat{}, nil, nil, false},
	{"POST", rx(`/databases/[^/]+/collections/[^/]+/attributes/boolean`), models.AttributeBoolean{}, nil, nil, false},
	{"POST", rx(`/databases/[^/]+/collections/[^/]+/attributes/datetime`), models.AttributeDatetime{}, nil, nil, false},
	{"POST", rx(`/databases/[^/]+/collections/[^/]+/attributes/enum`), models.AttributeEnum{}, nil, nil, false},
	{"GET", rx(`/databases/[^/]+/collections/[^/]+/attributes`), models.AttributeList{}, nil, nil, false},
	{"POST", rx(`/databases/[^/]+/collections/[^/]+/indexes`), models.Index{}, nil, nil, false},
	{"GET", rx(`/databases/[^/]+/collections/[^/]+/indexes`), models.IndexList{}, nil, nil, false},
	{"GET", rx(`/databases/[^/]+/collections/[^/]+/indexes/[^/]+`), models.Index{}, nil, nil, false},
	{"POST", rx(`/databases/[^/]+/collections/[^/]+/documents`), models.Document{}, nil, nil, true},
	{"GET", rx(`/databases/[^/]+/collections/[^/]+/documents/[^/]+`), models.Document{}, nil, nil, true},
	{"PATCH", rx(`/databases/[^/]+/collections/[^/]+/documents/[^/]+`), models.Document{}, nil, nil, true},
	{"GET", rx(`/databases/[^/]+/collections/[^/]+/documents`), models.DocumentList{}, nil, nil, true},
	{"POST", rx(`/storage/buckets`), models.Bucket{}, nil, nil, false},
	{"GET", rx(`/storage/buckets`), models.BucketList{}, nil, nil, false},
	{"GET", rx(`/storage/buckets/[^/]+`), models.Bucket{}, nil, nil, false},
	{"POST", rx(`/storage/buckets/[^/]+/files`), models.File{}, fileExtra, nil, false},
	{"GET", rx(`/storage/buckets/[^/]+/files/[^/]+`), models.File{}, fileExtra, nil, false},
}

// jsonFields lists the json keys of a model struct (exported fields only).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if name != "" && name != "-" {
			out[name] = f.Type
		}
	}
	return out
}

// checkShape fails on keys the model does not declare (unless allowed) and on declared
// keys the body lacks (unless allowed), recursing into nested model structs.
func checkShape(t *testing.T, where string, body map[string]any, typ reflect.Type, extra, missing []string, anyKeys bool) {
	t.Helper()
	fields := jsonFields(typ)
	for k := range body {
		if _, ok := fields[k]; ok || contains(extra, k) || (anyKeys && !strings.HasPrefix(k, "$")) {
			continue
		}
		t.Errorf("%s: unknown field %q for %s", where, k, typ.Name())
	}
	for k, ft := range fields {
		v, ok := body[k]
		if !ok {
			if !contains(missing, k) {
				t.Errorf("%s: missing field %q of %s", where, k, typ.Name())
			}
			continue
		}
		elem := ft
		if elem.Kind() == reflect.Slice {
			elem = elem.Elem()
		}
		if elem.Kind() != reflect.Struct || elem.PkgPath() != typ.PkgPath() || elem.NumField() == 1 {
			continue
		}
		// Nested models: lists of documents carry user attributes too.
		nestedAny := anyKeys && elem.Name() == "Document"
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				if m, ok := e.(map[string]any); ok {
					checkShape(t, where+"."+k, m, elem, extra, missing, nestedAny)
				}
			}
		case map[string]any:
			checkShape(t, where+"."+k, x, elem, extra, missing, nestedAny)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// TestResponsesDecodeStrictlyIntoSDKModels drives every endpoint the project uses through
// the Go SDK and checks each JSON body against the SDK v1.0.0 model, field by field.
func TestResponsesDecodeStrictlyIntoSDKModels(t *testing.T) {
	t.Parallel()
	ts := appwritetest.NewTestServer(t, appwritetest.Options{})
	rec := &recorder{}
	kc := keyClient(ts, ts.AdminKey)
	rec.attach(&kc)
	ac := anonClient(ts)
	rec.attach(&ac)

	acc := appwrite.NewAccount(ac)
	u, err := acc.Create(id.Unique(), "strict@example.com", "correct horse battery")
	require.NoError(t, err)
	_, err = acc.CreateEmailPasswordSession("strict@example.com", "correct horse battery")
	require.NoError(t, err)
	_, err = acc.Get()
	require.NoError(t, err)
	j, err := acc.CreateJWT()
	require.NoError(t, err)
	jc := jwtClient(ts, j.Jwt)
	rec.attach(&jc)

	users := appwrite.NewUsers(kc)
	_, err = users.Get(u.Id)
	require.NoError(t, err)
	_, err = users.Create(id.Unique(), users.WithCreateEmail("second@example.com"), users.WithCreatePassword("password123"))
	require.NoError(t, err)
	_, err = users.UpdateLabels(u.Id, []string{"admin"})
	require.NoError(t, err)
	_, err = users.CreateSession(u.Id)
	require.NoError(t, err)
	_, err = users.CreateJWT(u.Id)
	require.NoError(t, err)

	db := appwrite.NewDatabases(kc)
	_, err = db.Create("main", "Main")
	require.NoError(t, err)
	_, err = db.List()
	require.NoError(t, err)
	_, err = db.Get("main")
	require.NoError(t, err)
	_, err = db.CreateCollection("main", "c", "C", db.WithCreateCollectionDocumentSecurity(true))
	require.NoError(t, err)
	_, err = db.CreateStringAttribute("main", "c", "s", 10, true)
	require.NoError(t, err)
	_, err = db.CreateIntegerAttribute("main", "c", "i", false)
	require.NoError(t, err)
	_, err = db.CreateFloatAttribute("main", "c", "f", false)
	require.NoError(t, err)
	_, err = db.CreateBooleanAttribute("main", "c", "b", false)
	require.NoError(t, err)
	_, err = db.CreateDatetimeAttribute("main", "c", "d", false)
	require.NoError(t, err)
	_, err = db.CreateEnumAttribute("main", "c", "e", []string{"x", "y"}, false)
	require.NoError(t, err)
	waitAvailable(t, db, "c")
	_, err = db.CreateIndex("main", "c", "us", "unique", []string{"s"}, db.WithCreateIndexOrders([]string{"ASC"}))
	require.NoError(t, err)
	waitAvailable(t, db, "c")
	_, err = db.ListAttributes("main", "c")
	require.NoError(t, err)
	_, err = db.ListIndexes("main", "c")
	require.NoError(t, err)
	_, err = db.GetIndex("main", "c", "us")
	require.NoError(t, err)
	_, err = db.ListCollections("main")
	require.NoError(t, err)
	_, err = db.CreateDocument("main", "c", "d1", map[string]any{"s": "a", "i": 1, "f": 1.5, "b": true, "d": "2026-01-01T00:00:00Z", "e": "x"},
		db.WithCreateDocumentPermissions([]string{permission.Read(role.User(u.Id, ""))}))
	require.NoError(t, err)
	_, err = db.GetDocument("main", "c", "d1")
	require.NoError(t, err)
	_, err = db.UpdateDocument("main", "c", "d1", db.WithUpdateDocumentData(map[string]any{"i": 2}))
	require.NoError(t, err)
	_, err = db.ListDocuments("main", "c", db.WithListDocumentsQueries([]string{query.Limit(5)}))
	require.NoError(t, err)
	_, err = appwrite.NewDatabases(jc).ListDocuments("main", "c")
	require.NoError(t, err)
	_, err = db.CreateDocument("main", "c", "d1", map[string]any{"s": "b"})
	require.Error(t, err)
	_, err = db.GetDocument("main", "c", "zz")
	require.Error(t, err)

	st := appwrite.NewStorage(kc)
	_, err = st.CreateBucket("b", "B", st.WithCreateBucketFileSecurity(true))
	require.NoError(t, err)
	_, err = st.ListBuckets()
	require.NoError(t, err)
	_, err = st.GetBucket("b")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "x.txt")
	require.NoError(t, os.WriteFile(path, []byte("x"), 0o600))
	_, err = st.CreateFile("b", "f1", file.NewInputFile(path, "x.txt"))
	require.NoError(t, err)
	_, err = st.GetFile("b", "f1")
	require.NoError(t, err)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Greater(t, len(rec.seen), 30)
	matched := map[int]bool{}
	for _, r := range rec.seen {
		var body map[string]any
		require.NoError(t, json.Unmarshal(r.body, &body), "%s %s", r.method, r.path)
		where := r.method + " " + r.path
		if r.status >= 400 {
			checkErrorShape(t, where, body)
			continue
		}
		found := false
		for i, rule := range shapeRules {
			if rule.method == r.method && rule.path.MatchString(r.path) {
				checkShape(t, where, body, reflect.TypeOf(rule.model), rule.extra, rule.missing, rule.anyKeys)
				// And it must decode into the model with the SDK's own types.
				m := reflect.New(reflect.TypeOf(rule.model)).Interface()
				require.NoError(t, json.Unmarshal(r.body, m), where)
				matched[i] = true
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no model rule for %s (status %d)", where, r.status)
		}
	}
}

func checkErrorShape(t *testing.T, where string, body map[string]any) {
	t.Helper()
	require.Len(t, body, 4, "%s: error body %v", where, body)
	_, ok := body["code"].(float64)
	require.True(t, ok, "%s: code is a number", where)
	for _, k := range []string{"message", "type", "version"} {
		_, ok := body[k].(string)
		require.True(t, ok, "%s: %s is a string", where, k)
	}
}
