package lab

import (
	"os"
	"strings"
	"testing"
)

// TestDocsExampleScenarioIsValid keeps the scenario example in docs/lab.md
// in step with the parser.
func TestDocsExampleScenarioIsValid(t *testing.T) {
	data, err := os.ReadFile("../../docs/lab.md")
	if err != nil {
		t.Skip("docs/lab.md not found")
	}
	_, rest, ok := strings.Cut(string(data), "```yaml\n")
	if !ok {
		t.Fatal("no yaml example in docs/lab.md")
	}
	example, _, _ := strings.Cut(rest, "```")
	if _, err := ParseScenario([]byte(example)); err != nil {
		t.Errorf("docs/lab.md example: %v", err)
	}
}
