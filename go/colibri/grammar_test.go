package colibri

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
)

// TestGrammarDocuments: on the shipped default model, every generation under a JSON Schema
// grammar that ends with FinishEOS is a document of the schema; bad schemas are
// ErrInvalidArgument.
func TestGrammarDocuments(t *testing.T) {
	m, err := Open(filepath.Join("..", "..", "models", "default.colibri"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.NewGrammar(`{"type": `); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad JSON: %v", err)
	}
	g, err := m.NewGrammar(`{"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}},
		"required": ["answer"], "additionalProperties": false}`)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	s := newSession(t, m)
	finished := 0
	for seed := uint64(0); seed < 8; seed++ {
		if err := s.Reset(); err != nil {
			t.Fatal(err)
		}
		p := DefaultGenerateParams()
		p.Temperature, p.TopK, p.Seed, p.MaxTokens, p.Grammar = 1, 0, seed, 32, g
		text := ""
		r, err := s.Generate(context.Background(), []int32{17, 300, 5}, p, func(_ int32, piece string) bool { text += piece; return false })
		if err != nil {
			t.Fatal(err)
		}
		if r.Finish != FinishEOS {
			continue
		}
		var doc map[string]string
		if err := json.Unmarshal([]byte(text), &doc); err != nil || len(doc) != 1 || (doc["answer"] != "yes" && doc["answer"] != "no") {
			t.Fatalf("seed %d: %q is not a document of the schema (%v)", seed, text, err)
		}
		finished++
	}
	if finished < 6 {
		t.Fatalf("only %d/8 seeds finished a document", finished)
	}
}
