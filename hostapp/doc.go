// Package hostapp holds the tests of the runtime API (issue 19 item 2) from a host app's
// side: its server uses the official OpenAI Go client (github.com/openai/openai-go/v3)
// against the functions behind the local function host, with the resident agent and the
// scripted model behind them. It has no code of its own.
package hostapp
