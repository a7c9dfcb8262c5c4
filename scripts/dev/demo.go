package main

import (
	"regexp"

	"privateassistant/modeltest"
)

// tokenRe cuts text into tokens the way a model streams them: each token is a word with
// the whitespace before it, so the tokens joined are the text exactly (spaces, line
// breaks and Markdown intact).
var tokenRe = regexp.MustCompile(`\s*\S+|\s+$`)

// tokens splits text into streamed tokens; strings.Join(tokens(s), "") == s.
func tokens(text string) []string { return tokenRe.FindAllString(text, -1) }

// demoMarkdown is the scripted answer to "#markdown": what the renderer must show (a
// heading, a list, a table, a code block, and HTML the model wrote, shown as text).
const demoMarkdown = "## Counting lines\n\n" +
	"Three ways, fastest first:\n\n" +
	"1. `wc -l` reads the file once.\n" +
	"2. A Python loop is portable.\n" +
	"3. **awk** can filter as it counts.\n\n" +
	"| Tool | Speed |\n|---|---|\n| wc | fast |\n| python | medium |\n\n" +
	"```python\ndef count(path):\n    with open(path) as f:\n        return sum(1 for _ in f)\n```\n\n" +
	"Model HTML is shown as text: <b>not bold</b>."

// demoToolCommand is what "#tool" asks the terminal to run: a recursive delete, which the
// real Hermes's approval patterns guard ("recursive delete"), so the run asks the user
// first; harmless where it runs (a folder that need not exist in the member's own work
// folder). The Hermes double asks before every terminal command.
const demoToolCommand = "rm -rf scratch"

// demoScripts registers the dev stack's own scripted answers on the demo model.
func demoScripts(m *modeltest.Backend) {
	m.SetScript("#tool", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: tokens("Let me clear the scratch folder."), ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: `{"command":"` + demoToolCommand + `"}`}}},
		{Tokens: tokens("The scratch folder is taken care of.")},
	}})
	m.SetScript("#research", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: tokens("Researching… collecting sources."), ToolCalls: []modeltest.ToolCall{{Name: "write_file", Arguments: `{"path":"notes.md","content":"# Notes\n\n- first source\n- second source\n"}`}}},
		{Tokens: tokens("I saved my notes as notes.md.")},
	}})
	// The coordinator: the chat role hands a research job on (enqueue_job on the agent's
	// MCP job server) and goes on; the job's answer lands in the same conversation.
	m.SetScript("#delegate", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: tokens("I'll hand that to a research job."), ToolCalls: []modeltest.ToolCall{{Name: "mcp__pa__enqueue_job",
			Arguments: `{"role":"research","instructions":"#research the history of the abacus","title":"Abacus history"}`}}},
		{Tokens: tokens("The research job is queued; its notes will appear in this conversation.")},
	}})
	m.SetScript("#markdown", modeltest.Script{Turns: []modeltest.Turn{{Tokens: tokens(demoMarkdown)}}})
}
