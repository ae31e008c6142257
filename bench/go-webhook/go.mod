module hyperslice.dev/bench/go-webhook

go 1.21
