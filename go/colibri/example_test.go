package colibri_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/colibri-llm/colibri/go/colibri"
)

// Generate text greedily from a prompt, streaming it to stdout.
func Example() {
	m, err := colibri.Open("model.colibri")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	s, err := m.NewSession()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	prompt, err := m.Tokenize("Once upon a time", true)
	if err != nil {
		log.Fatal(err)
	}
	p := colibri.DefaultGenerateParams()
	p.Temperature = 0 // greedy
	p.MaxTokens = 64
	p.Stop = []string{"\n\n"} // end at a blank line (never printed)
	res, err := s.Generate(context.Background(), prompt, p, func(token int32, text string) bool {
		fmt.Print(text)
		return false // true stops (as in C: non-zero stops)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println()
	if res.Finish == colibri.FinishLength {
		fmt.Printf("(cut at %d tokens)\n", len(res.Tokens))
	}
}

// Chat: render the conversation with the model's template, then generate.
func ExampleModel_ChatRender() {
	m, err := colibri.Open("model.colibri")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	text, err := m.ChatRender([]colibri.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "What is 2+2?"},
	}, true)
	if errors.Is(err, colibri.ErrUnsupported) {
		log.Fatal("this model has no chat template")
	} else if err != nil {
		log.Fatal(err)
	}
	ids, err := m.Tokenize(text, false) // the template wrote the special tokens
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(ids), "prompt tokens")
}

// Stream pieces over a channel, with cancellation.
func ExampleSession_GenerateChan() {
	m, err := colibri.Open("model.colibri")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	s, err := m.NewSession(colibri.WithContextSize(2048))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	prompt, _ := m.Tokenize("Hello", true)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pieces, errc := s.GenerateChan(ctx, prompt, colibri.DefaultGenerateParams())
	for p := range pieces {
		os.Stdout.WriteString(p.Text)
	}
	if err := <-errc; err != nil {
		log.Fatal(err)
	}
}

// Logits of a token sequence.
func ExampleSession_Infer() {
	m, err := colibri.Open("model.colibri")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	s, err := m.NewSession()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	logits, err := s.Infer([]int32{1, 2, 3}) // the last position's VocabSize logits
	var ce *colibri.Error
	if errors.As(err, &ce) {
		log.Fatalf("status %d (%s): %s", ce.Status, ce.Status, ce.Message)
	}
	fmt.Println(len(logits) == m.Info().VocabSize)
}
