package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"privateassistant/agent/harness"
	"privateassistant/schema"
)

// InputsDir is the folder, inside a run's own folder, that holds the run's attached
// files: <work folder>/runs/<run id>/inputs/<file name> (RunsDir); without a work folder,
// <ArtifactRoot>/inputs/<run id>/<file name>.
const InputsDir = "inputs"

// Attached files: inputs.attach places the files attached to the run's message in the run's own
// folder before the run starts and returns the input with their paths appended (issue
// 17). The folder is the run's (runs/<run id>/inputs in the harness's work folder,
// HermesWorkDir or the member's; else <ArtifactRoot>/inputs/<run id>, which no run's
// artifact upload reads). Each file is fetched with the agent's key after
// checking again that it is the run owner's and within the limits; its name is reduced to
// a safe base name, and it is written through os.Root (no path leaves the folder, no
// link is followed). Idempotent: a file already there with its size is kept, so a resumed
// attempt neither fetches it again nor duplicates it, and the text is the same on every
// attempt. The model is told paths only, never a key or a URL. A harness without file
// tools (the direct one, plain chat) is given the text of text files instead, fenced,
// within half the route's context budget (at most 64 KiB); other files are named with why
// they are not shown. Earlier turns' files are named again in the history (inputs.earlier).
//
// inputs places attached files for one run: the folder as this host sees it and as the
// harness names it, and, for a harness without file tools, what is left of the budget of
// text it may be given (the run's own message takes it first, then earlier turns').
type inputs struct {
	a           *attempt
	dir, shown  string
	sub         string // the folder inside a run's folder that holds its files ("" for none)
	inline      bool
	budget      int64
	earlierLeft int // files of earlier turns still to list (earlierFilesMax)
}

// earlierFilesMax bounds the files of earlier turns a run is told of again (newest
// first): each costs an Appwrite read, and a download where this host lacks it.
const earlierFilesMax = 2 * schema.MaxAttachments

func (a *attempt) newInputs() *inputs {
	in := &inputs{a: a, earlierLeft: earlierFilesMax}
	switch {
	case a.workDir != "":
		shown := a.cwd
		if shown == "" {
			shown = a.workDir
		}
		in.dir, in.shown, in.sub = filepath.Join(a.workDir, RunsDir), filepath.Join(shown, RunsDir), InputsDir
	case a.e.ArtifactRoot != "":
		in.dir = filepath.Join(a.e.ArtifactRoot, InputsDir)
		in.shown = in.dir
	}
	// A harness without file tools (the direct one: plain chat) gets the text of text files
	// in the input instead, within a budget of half the route's context (4 bytes a token).
	in.inline = a.h != nil && a.h.Kind() == harness.DirectKind
	if in.inline && a.route != nil {
		in.budget = min(a.route.ContextBudget*2, maxInlineBytes)
	}
	return in
}

// attach returns input with the note naming msg's files, placed for this run.
func (in *inputs) attach(ctx context.Context, msg *schema.Message, input string) (string, error) {
	if len(msg.Attachments) == 0 {
		return input, nil
	}
	if len(msg.Attachments) > schema.MaxAttachments {
		return "", fmt.Errorf("message %s carries %d attachments (limit %d)", msg.ID, len(msg.Attachments), schema.MaxAttachments)
	}
	lines, texts, err := in.files(ctx, msg.Attachments, in.a.runID, true)
	if err != nil {
		return "", err
	}
	return in.withNote(input, "Attached files", "saved in this run's folder; read them with your file tools", lines, texts), nil
}

// withNote appends to text the note naming files: header, where they are (for a harness
// with file tools), one line each, and for a harness without them their texts.
func (in *inputs) withNote(text, header, where string, lines, texts []string) string {
	note := header + " (" + where + "):\n" + strings.Join(lines, "\n")
	if in.inline {
		note = header + ":\n" + strings.Join(lines, "\n")
		if len(texts) > 0 {
			note += "\n\n" + strings.Join(texts, "\n\n")
		}
	}
	if strings.TrimSpace(text) == "" {
		return note
	}
	return text + "\n\n" + note
}

// earlier returns the text an earlier user message of the conversation is given in the
// history: its own text and, when files were attached to it, a note naming them again
// (placed again in the inputs of the run that answered it when this host lacks them), so a
// later turn can still read them. Messages are passed newest first (the budget and the
// bound go to the latest files); files beyond earlierFilesMax are counted, not listed.
func (in *inputs) earlier(ctx context.Context, m *schema.Message, text string) (string, error) {
	if m.Role != "user" || len(m.Attachments) == 0 || m.RunID == nil || *m.RunID == "" {
		return text, nil
	}
	ids := m.Attachments
	if len(ids) > schema.MaxAttachments {
		ids = ids[:schema.MaxAttachments]
	}
	if len(ids) > in.earlierLeft {
		ids = ids[:in.earlierLeft]
	}
	in.earlierLeft -= len(ids)
	var lines, texts []string
	if len(ids) > 0 {
		var err error
		if lines, texts, err = in.files(ctx, ids, *m.RunID, false); err != nil {
			return "", err
		}
	}
	if n := len(m.Attachments) - len(ids); n > 0 {
		lines = append(lines, fmt.Sprintf("- (%d more file(s), not listed again)", n))
	}
	return in.withNote(text, "Files attached to this message", "saved where listed; read them with your file tools", lines, texts), nil
}

// files places the files ids, attached to the message run answered, in run's folder and
// returns the lines naming them and, for a harness without file tools, their texts; with
// report, the run's progress counts the files staged.
func (in *inputs) files(ctx context.Context, ids []string, run string, report bool) (lines, texts []string, err error) {
	a := in.a
	used := map[string]bool{}
	staged := 0
	for _, id := range ids {
		u, err := a.e.Store.Upload(ctx, a.run.OwnerID, id)
		if errors.Is(err, schema.ErrNotFound) {
			lines = append(lines, fmt.Sprintf("- (a file that is no longer available, id %s)", id))
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("attachment %s: %w", id, err)
		}
		if u.Size > schema.MaxUploadBytes || !schema.UploadExtensionAllowed(u.Name) {
			lines = append(lines, fmt.Sprintf("- %s (refused: type or size not allowed)", SafeName(u.Name)))
			continue
		}
		name := SafeName(u.Name)
		for n := 2; used[strings.ToLower(name)]; n++ {
			name = fmt.Sprintf("%d-%s", n, SafeName(u.Name))
		}
		used[strings.ToLower(name)] = true
		if in.dir == "" {
			lines = append(lines, fmt.Sprintf("- %s (%s; not placed: this agent has no working folder)", name, humanSize(u.Size)))
			continue
		}
		rel := path.Join(run, in.sub, name)
		if err := a.placeInput(ctx, in.dir, rel, u); err != nil {
			return nil, nil, fmt.Errorf("attachment %s: %w", id, err)
		}
		if staged++; report {
			// Files staged, n of the attachments (issue 32 item 6).
			if err := a.progress(ctx, int64(staged), int64(len(ids)), "files staged", ""); err != nil {
				return nil, nil, err
			}
		}
		if in.inline {
			text, why := inlineText(filepath.Join(in.dir, filepath.FromSlash(rel)), name, &in.budget)
			if why != "" {
				lines = append(lines, fmt.Sprintf("- %s (%s; %s)", name, humanSize(u.Size), why))
				continue
			}
			lines = append(lines, fmt.Sprintf("- %s (%s)", name, humanSize(u.Size)))
			texts = append(texts, text)
			continue
		}
		lines = append(lines, fmt.Sprintf("- %s (%s)", filepath.Join(in.shown, filepath.FromSlash(rel)), humanSize(u.Size)))
	}
	return lines, texts, nil
}

// maxInlineBytes bounds the attached text a harness without file tools is given.
const maxInlineBytes = 64 << 10

// textExtensions are the attachable types whose content is text.
var textExtensions = []string{"txt", "md", "markdown", "csv", "tsv", "json", "jsonl", "yaml", "yml", "toml", "xml", "html", "htm", "log",
	"py", "go", "js", "ts", "java", "c", "h", "cpp", "rs", "rb", "sh", "sql", "css"}

// inlineText returns a placed file's text fenced for the model, taking its size from
// *budget, or why it is not shown.
func inlineText(p, name string, budget *int64) (string, string) {
	if !slices.Contains(textExtensions, strings.TrimPrefix(strings.ToLower(filepath.Ext(name)), ".")) {
		return "", "not shown: plain chat reads text files only; a work role's tools can open it"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", "could not be read"
	}
	if !utf8.Valid(b) {
		return "", "not shown: not UTF-8 text"
	}
	if int64(len(b)) > *budget {
		return "", "not shown: too long for this chat's context; a work role's tools can open it"
	}
	*budget -= int64(len(b))
	fence := "```"
	for strings.Contains(string(b), fence) {
		fence += "`"
	}
	return fmt.Sprintf("%s (the file's text):\n%s\n%s\n%s", name, fence, strings.TrimRight(string(b), "\n"), fence), ""
}

// placeInput writes upload u at rel inside dir unless a file of its size is already there.
func (a *attempt) placeInput(ctx context.Context, dir, rel string, u schema.Upload) error {
	root, err := a.openDir(dir) // never through a link out of the member's home
	if err != nil {
		return err
	}
	defer root.Close()
	if fi, err := root.Lstat(rel); err == nil && fi.Mode().IsRegular() && fi.Size() == u.Size {
		return nil // placed by an earlier attempt
	}
	if err := root.MkdirAll(path.Dir(rel), 0o750); err != nil {
		return err
	}
	b, err := a.e.Store.UploadBytes(ctx, u.ID)
	if err != nil {
		return err
	}
	if int64(len(b)) != u.Size || len(b) > schema.MaxUploadBytes {
		return fmt.Errorf("downloaded %d bytes, expected %d", len(b), u.Size)
	}
	tmp := rel + ".part"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return root.Rename(tmp, rel)
}

// SafeName reduces an uploaded file's name to a safe base name: no folder, no leading
// dot, only letters, digits, spaces and ._- (others become _), at most 100 bytes with
// the extension kept, never empty.
func SafeName(name string) string {
	name = strings.ReplaceAll(name, "\\", "/")
	name = path.Base(name)
	var b strings.Builder
	for _, r := range name {
		switch {
		case r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '-' || r == '_' || r == ' '):
			b.WriteRune(r)
		default:
			b.WriteRune('_')
		}
	}
	s := strings.TrimLeft(strings.TrimSpace(b.String()), ".")
	if len(s) > 100 {
		ext := path.Ext(s)
		if len(ext) > 20 {
			ext = ""
		}
		s = s[:100-len(ext)] + ext
	}
	if s == "" || s == "." || s == ".." {
		s = "file"
	}
	return s
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
