package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// keyLiteralsAllowed are "pa:…" string literals outside queue/keys.go that are not Redis
// keys: the asynq task types of a run, a release probe and a route qualification.
var keyLiteralsAllowed = map[string]bool{"queue/tasks.go pa:run": true, "queue/tasks.go pa:probe": true, "queue/tasks.go pa:qualify": true}

// TestRedisKeysAreBuiltInQueueKeys keeps "every Redis key is built in queue/keys.go;
// Lua scripts are passed their keys" (issue 31 item 5) true: no other non-test Go file
// spells a "pa:" key, and no Lua script builds one.
func TestRedisKeysAreBuiltInQueueKeys(t *testing.T) {
	root := moduleRoot(t)
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if rel == filepath.Join("queue", "keys.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil // not ours to judge here (go vet does)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			// A key: "pa:" then a name (a message like "pa: warning" is not one).
			if err == nil && len(v) > 3 && strings.HasPrefix(v, "pa:") && (v[3] >= 'a' && v[3] <= 'z' || v[3] == '{') &&
				!keyLiteralsAllowed[filepath.ToSlash(rel)+" "+v] {
				found = append(found, rel+": "+v)
			}
			// A Lua script building a key itself ('pa:…' .. a value): scripts are passed
			// every key they touch (KEYS), built here in queue/keys.go.
			if err == nil && strings.Contains(v, "redis.call(") && (strings.Contains(v, "'pa:") || strings.Contains(v, `"pa:`)) {
				found = append(found, rel+": a Lua script builds a key: "+strings.TrimSpace(v[:min(len(v), 80)]))
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "Redis keys spelled outside queue/keys.go: build them there")
}
