package appwritetest

import (
	"io"
	"net/http"
	"sort"
	"sync"
	"time"
)

// The Functions API, as much of it as a release and a rollback use, in Appwrite 1.9.6's
// shapes (src/Appwrite/Platform/Modules/Functions/Http/...): create, get and list
// functions; create (multipart code upload), get and list deployments; and activate one
// (PATCH /v1/functions/{id}/deployment). Scopes functions.read / functions.write.
//
// Modelled quirks: a new deployment is "waiting" and becomes "ready" after
// Options.ProcessingDelay (the build worker), then, with activate=true, the function's
// active deployment. Activation refuses a deployment that is not ready (400
// build_not_ready) but, like Functions/Deployment/Update.php, does not check that the
// deployment belongs to the function; getting a deployment through another function is
// 404 deployment_not_found (Deployments/Get.php). Nothing is built or executed, and
// functions are not part of the data directory's snapshot.

type function struct {
	ID, Name, Runtime, Entrypoint, Commands string
	Execute, Scopes, Events                 []string
	Timeout                                 int64
	Enabled, Logging                        bool
	DeploymentID                            string
	DeploymentCreatedAt                     time.Time
	CreatedAt, UpdatedAt                    time.Time
}

type deployment struct {
	ID, FunctionID, Entrypoint string
	Size                       int64
	Activate                   bool
	ReadyAt                    time.Time
	CreatedAt, UpdatedAt       time.Time
}

type functionStore struct {
	mu    sync.Mutex
	fns   map[string]*function
	deps  map[string]*deployment
	order []string // deployment ids in creation order
}

func errFunctionNotFound() *apiError {
	return errf(404, "function_not_found", "Function with the requested ID could not be found.")
}

func errDeploymentNotFound() *apiError {
	return errf(404, "deployment_not_found", "Deployment with the requested ID could not be found.")
}

// settle finishes the "builds" whose time has come and activates the ones asked to.
func (s *Server) settleDeployments(fs *functionStore) {
	now := s.now()
	for _, id := range fs.order {
		d := fs.deps[id]
		if d.Activate && !d.ReadyAt.After(now) {
			d.Activate = false
			if f := fs.fns[d.FunctionID]; f != nil {
				f.DeploymentID, f.DeploymentCreatedAt, f.UpdatedAt = d.ID, d.CreatedAt, now
			}
		}
	}
}

func (s *Server) deploymentStatus(d *deployment) string {
	if d.ReadyAt.After(s.now()) {
		return "waiting"
	}
	return "ready"
}

func (s *Server) deploymentJSON(d *deployment) map[string]any {
	return map[string]any{
		"$id": d.ID, "$createdAt": fmtTime(d.CreatedAt), "$updatedAt": fmtTime(d.UpdatedAt),
		"type": "manual", "resourceId": d.FunctionID, "resourceType": "functions", "entrypoint": d.Entrypoint,
		"sourceSize": d.Size, "buildSize": 0, "totalSize": d.Size, "buildId": "", "activate": d.Activate,
		"screenshotLight": "", "screenshotDark": "", "status": s.deploymentStatus(d), "buildLogs": "",
		"buildDuration": 0, "providerRepositoryName": "", "providerRepositoryOwner": "", "providerRepositoryUrl": "",
		"providerCommitHash": "", "providerCommitAuthorUrl": "", "providerCommitAuthor": "", "providerCommitMessage": "",
		"providerCommitUrl": "", "providerBranch": "", "providerBranchUrl": "",
	}
}

func (s *Server) functionJSON(fs *functionStore, f *function) map[string]any {
	latest, latestAt, latestStatus := "", "", ""
	for _, id := range fs.order {
		if d := fs.deps[id]; d.FunctionID == f.ID {
			latest, latestAt, latestStatus = d.ID, fmtTime(d.CreatedAt), s.deploymentStatus(d)
		}
	}
	nz := func(xs []string) []string {
		if xs == nil {
			return []string{}
		}
		return xs
	}
	return map[string]any{
		"$id": f.ID, "$createdAt": fmtTime(f.CreatedAt), "$updatedAt": fmtTime(f.UpdatedAt),
		"execute": nz(f.Execute), "name": f.Name, "enabled": f.Enabled, "live": true, "logging": f.Logging,
		"runtime": f.Runtime, "deploymentRetention": 0, "deploymentId": f.DeploymentID,
		"deploymentCreatedAt": fmtTime(f.DeploymentCreatedAt), "latestDeploymentId": latest,
		"latestDeploymentCreatedAt": latestAt, "latestDeploymentStatus": latestStatus,
		"scopes": nz(f.Scopes), "vars": []any{}, "events": nz(f.Events), "schedule": "", "timeout": f.Timeout,
		"entrypoint": f.Entrypoint, "commands": f.Commands, "version": "v5", "installationId": "",
		"providerRepositoryId": "", "providerBranch": "", "providerRootDirectory": "", "providerSilentMode": false,
		"providerBranches": []string{}, "providerPaths": []string{},
		"buildSpecification": "s-1vcpu-512mb", "runtimeSpecification": "s-1vcpu-512mb",
	}
}

// listWindow applies limit (default 25), offset and cursorAfter/cursorBefore (an id of
// ids) to ids; an unknown cursor is 400 general_cursor_not_found.
func listWindow(r *http.Request, ids []string, what string) ([]string, error) {
	qs, err := parseQueries(r)
	if err != nil {
		return nil, err
	}
	limit, offset := 25, 0
	for _, q := range qs {
		switch q.Method {
		case "limit", "offset":
			n, err := intValue(q)
			if err != nil || n < 0 {
				return nil, errQuery("Invalid %s: Value must be a valid range", q.Method)
			}
			if q.Method == "limit" {
				limit = n
			} else {
				offset = n
			}
		case "orderDesc":
			if q.Attribute == "$createdAt" || q.Attribute == "$sequence" {
				for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
					ids[i], ids[j] = ids[j], ids[i]
				}
			}
		case "orderAsc":
		case "cursorAfter", "cursorBefore":
			v := q.strValues()
			at := -1
			for i, id := range ids {
				if len(v) == 1 && id == v[0] {
					at = i
				}
			}
			if at < 0 {
				return nil, errf(400, "general_cursor_not_found", "%s for the 'cursor' value not found.", what)
			}
			if q.Method == "cursorAfter" {
				ids = ids[at+1:]
			} else {
				ids = ids[:at]
			}
		default:
			return nil, errQuery("Invalid query: %s is not modelled by this emulator", q.Method)
		}
	}
	if offset >= len(ids) {
		return nil, nil
	}
	ids = ids[offset:]
	if len(ids) > limit {
		ids = ids[:limit]
	}
	return ids, nil
}

func (s *Server) routesFunctions() {
	fs := &functionStore{fns: map[string]*function{}, deps: map[string]*deployment{}}
	lock := func() func() {
		fs.mu.Lock()
		s.settleDeployments(fs)
		return fs.mu.Unlock
	}

	s.handle("POST /v1/functions", "functions.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		raw, _ := str(body, "functionId")
		id, err := resolveID("functionId", raw)
		if err != nil {
			return err
		}
		name, _ := str(body, "name")
		runtime, _ := str(body, "runtime")
		if runtime == "" {
			return errArgument("runtime", "Value must be one of the runtimes")
		}
		f := &function{ID: id, Name: name, Runtime: runtime, Timeout: 15}
		f.Entrypoint, _ = str(body, "entrypoint")
		f.Commands, _ = str(body, "commands")
		if f.Execute, _, err = strList(body, "execute"); err != nil {
			return err
		}
		if f.Scopes, _, err = strList(body, "scopes"); err != nil {
			return err
		}
		if f.Events, _, err = strList(body, "events"); err != nil {
			return err
		}
		if n, ok, err := intParam(body, "timeout"); err != nil {
			return err
		} else if ok {
			f.Timeout = n
		}
		if f.Enabled, err = boolean(body, "enabled", true); err != nil {
			return err
		}
		if f.Logging, err = boolean(body, "logging", true); err != nil {
			return err
		}
		defer lock()()
		if fs.fns[id] != nil {
			return errf(409, "function_already_exists", "Function with the requested ID already exists. Try again with a different ID or use ID.unique() to generate a unique ID.")
		}
		f.CreatedAt, f.UpdatedAt = s.now(), s.now()
		fs.fns[id] = f
		writeJSON(w, 201, s.functionJSON(fs, f))
		return nil
	})
	s.handle("GET /v1/functions", "functions.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		defer lock()()
		ids := sortedKeys(fs.fns)
		sort.SliceStable(ids, func(i, j int) bool { return fs.fns[ids[i]].CreatedAt.Before(fs.fns[ids[j]].CreatedAt) })
		total := len(ids)
		ids, err := listWindow(r, ids, "Function")
		if err != nil {
			return err
		}
		out := []map[string]any{}
		for _, id := range ids {
			out = append(out, s.functionJSON(fs, fs.fns[id]))
		}
		writeJSON(w, 200, map[string]any{"total": total, "functions": out})
		return nil
	})
	s.handle("GET /v1/functions/{fn}", "functions.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		defer lock()()
		f := fs.fns[r.PathValue("fn")]
		if f == nil {
			return errFunctionNotFound()
		}
		writeJSON(w, 200, s.functionJSON(fs, f))
		return nil
	})
	s.handle("PATCH /v1/functions/{fn}/deployment", "functions.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		depID, _ := str(body, "deploymentId")
		defer lock()()
		f := fs.fns[r.PathValue("fn")]
		if f == nil {
			return errFunctionNotFound()
		}
		d := fs.deps[depID]
		if d == nil {
			return errDeploymentNotFound()
		}
		if s.deploymentStatus(d) != "ready" {
			return errf(400, "build_not_ready", "Build with the requested ID is building and not ready for execution.")
		}
		f.DeploymentID, f.DeploymentCreatedAt, f.UpdatedAt = d.ID, d.CreatedAt, s.now()
		writeJSON(w, 200, s.functionJSON(fs, f))
		return nil
	})
	s.handle("POST /v1/functions/{fn}/deployments", "functions.write", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			return errf(400, "storage_file_empty", "No file sent")
		}
		fh, _, err := r.FormFile("code")
		if err != nil {
			return errf(400, "storage_file_empty", "No file sent")
		}
		n, _ := io.Copy(io.Discard, fh)
		fh.Close()
		activate := r.FormValue("activate") == "true" || r.FormValue("activate") == "1"
		defer lock()()
		f := fs.fns[r.PathValue("fn")]
		if f == nil {
			return errFunctionNotFound()
		}
		entry := r.FormValue("entrypoint")
		if entry == "" {
			entry = f.Entrypoint
		}
		if entry == "" {
			return errf(404, "function_entrypoint_missing", "Entrypoint for your Appwrite Function is missing. Please specify it when making deployment or update the entrypoint under your function's \"Settings\" > \"Configuration\" > \"Entrypoint\".")
		}
		now := s.now()
		d := &deployment{ID: uniqueID(), FunctionID: f.ID, Entrypoint: entry, Size: n, Activate: activate,
			ReadyAt: now.Add(s.opts.ProcessingDelay), CreatedAt: now, UpdatedAt: now}
		fs.deps[d.ID] = d
		fs.order = append(fs.order, d.ID)
		writeJSON(w, 202, s.deploymentJSON(d))
		return nil
	})
	s.handle("GET /v1/functions/{fn}/deployments", "functions.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		defer lock()()
		f := fs.fns[r.PathValue("fn")]
		if f == nil {
			return errFunctionNotFound()
		}
		ids := []string{}
		for _, id := range fs.order {
			if fs.deps[id].FunctionID == f.ID {
				ids = append(ids, id)
			}
		}
		total := len(ids)
		ids, err := listWindow(r, ids, "Deployment")
		if err != nil {
			return err
		}
		out := []map[string]any{}
		for _, id := range ids {
			out = append(out, s.deploymentJSON(fs.deps[id]))
		}
		writeJSON(w, 200, map[string]any{"total": total, "deployments": out})
		return nil
	})
	s.handle("GET /v1/functions/{fn}/deployments/{dep}", "functions.read", func(w http.ResponseWriter, r *http.Request, c *caller) error {
		defer lock()()
		f := fs.fns[r.PathValue("fn")]
		if f == nil {
			return errFunctionNotFound()
		}
		d := fs.deps[r.PathValue("dep")]
		if d == nil || d.FunctionID != f.ID {
			return errDeploymentNotFound()
		}
		writeJSON(w, 200, s.deploymentJSON(d))
		return nil
	})
}
