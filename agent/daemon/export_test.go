package daemon

// JobState is jobState, for the external tests.
var JobState = jobState
