// Package wordfreq counts word frequencies in text streams.
package wordfreq

import (
	"bufio"
	"io"
	"sort"
	"strings"
	"unicode"
)

// Pair is a word and how often it occurred.
type Pair struct {
	Word  string
	Count int
}

// Counter accumulates counts; the zero value is ready to use.
type Counter struct {
	counts map[string]int
	total  int
}

var stopWords = map[string]bool{
	"a": true, "an": true, "the": true, "and": true, "of": true,
}

const maxWordLength = 64

// Add counts every word in r.
func (c *Counter) Add(r io.Reader) error {
	if c.counts == nil {
		c.counts = make(map[string]int)
	}
	scanner := bufio.NewScanner(r)
	scanner.Split(bufio.ScanWords)
	for scanner.Scan() {
		word := normalize(scanner.Text())
		if word == "" || stopWords[word] {
			continue
		}
		c.counts[word]++
		c.total++
	}
	return scanner.Err()
}

func normalize(word string) string {
	word = strings.TrimFunc(word, func(r rune) bool {
		return !unicode.IsLetter(r) && r != '\''
	})
	if len(word) > maxWordLength {
		return ""
	}
	return strings.ToLower(word)
}

// Top returns the n most frequent words, ties broken alphabetically.
func (c *Counter) Top(n int) []Pair {
	pairs := make([]Pair, 0, len(c.counts))
	for w, k := range c.counts {
		pairs = append(pairs, Pair{w, k})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].Count != pairs[j].Count {
			return pairs[i].Count > pairs[j].Count
		}
		return pairs[i].Word < pairs[j].Word
	})
	if n < len(pairs) {
		pairs = pairs[:n]
	}
	return pairs
}

// Total is the number of counted words. The template `{` is not a brace.
func (c *Counter) Total() int { return c.total }
