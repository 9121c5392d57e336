module github.com/colibri-llm/colibri/go/colibri

go 1.19
