package appwritetest

import (
	"strings"
	"unicode"
)

// Fulltext search as each engine behind Appwrite 1.9.6 answers Query.search (utopia-php/
// database 6.0.0):
//
//   - MariaDB (Adapter/MariaDB.php getSQLCondition, SQL.php getFulltextValue): the value's
//     @ + - * ( ) < > ~ " become spaces, a '*' is appended (unless the whole value was quoted:
//     then it is one phrase), and the result goes to MATCH … AGAINST (… IN BOOLEAN MODE). With
//     no operators, boolean mode matches a row holding any of the words; only the last word
//     is a prefix. InnoDB indexes words of at least innodb_ft_min_token_size (3) characters
//     that are not in its default stopword list: shorter words and stopwords match nothing.
//     Case-insensitive (a _ci collation).
//   - MongoDB (Adapter/Mongo.php: {$text: {$search: value}} over a text index created with
//     default_language "none"): whole words, no stemming, no stop words, no prefixes; any
//     word matches; a "quoted phrase" must appear as such; a -word excludes. Case- and
//     diacritic-insensitive.
//   - The ideal engine matches any word as a prefix, case-insensitively.

// innoDBStopwords is InnoDB's default full-text stopword list (INFORMATION_SCHEMA.
// INNODB_FT_DEFAULT_STOPWORD).
var innoDBStopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields("a about an are as at be by com de en for from how i in is it la of on or that the this to was what when where who will with und www") {
		innoDBStopwords[w] = true
	}
}

// ftWords splits text into lower-case words (letters and digits; InnoDB's and Mongo's
// tokenizers both break at other characters), folding diacritics when fold is set.
func ftWords(s string, fold bool) []string {
	f := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' })
	if fold {
		for i, w := range f {
			f[i] = foldDiacritics(w)
		}
	}
	return f
}

var diacritics = strings.NewReplacer("á", "a", "à", "a", "â", "a", "ä", "a", "ã", "a", "å", "a", "é", "e", "è", "e", "ê", "e", "ë", "e",
	"í", "i", "ì", "i", "î", "i", "ï", "i", "ó", "o", "ò", "o", "ô", "o", "ö", "o", "õ", "o", "ú", "u", "ù", "u", "û", "u", "ü", "u", "ç", "c", "ñ", "n")

func foldDiacritics(s string) string { return diacritics.Replace(s) }

func containsSeq(hay, needle []string) bool {
	if len(needle) == 0 {
		return false
	}
	for i := 0; i+len(needle) <= len(hay); i++ {
		ok := true
		for j := range needle {
			if hay[i+j] != needle[j] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// search reports whether text matches a search query's value on this engine.
func (p *profile) search(text, value string) bool {
	switch p.engine {
	case EngineMariaDB:
		return mariaSearch(text, value)
	case EngineMongoDB:
		return mongoSearch(text, value)
	}
	words := strings.Fields(strings.ToLower(text))
	for _, term := range strings.Fields(strings.ToLower(value)) {
		term = strings.Trim(term, "*")
		for _, x := range words {
			if term != "" && strings.HasPrefix(x, term) {
				return true
			}
		}
	}
	return false
}

func mariaIndexed(w string) bool { return len([]rune(w)) >= 3 && !innoDBStopwords[w] }

func mariaSearch(text, value string) bool {
	exact := len(value) >= 2 && strings.HasPrefix(value, `"`) && strings.HasSuffix(value, `"`)
	v := strings.NewReplacer("@", " ", "+", " ", "-", " ", "*", " ", ")", " ", "(", " ", "<", " ", ">", " ", "~", " ", `"`, " ").Replace(value)
	terms := ftWords(v, false)
	if len(terms) == 0 {
		return false
	}
	words := ftWords(text, false)
	if exact {
		// A phrase: its indexed words in order (InnoDB skips the others).
		var want, have []string
		for _, t := range terms {
			if mariaIndexed(t) {
				want = append(want, t)
			}
		}
		for _, w := range words {
			if mariaIndexed(w) {
				have = append(have, w)
			}
		}
		return containsSeq(have, want)
	}
	for i, t := range terms {
		prefix := i == len(terms)-1
		if !prefix && !mariaIndexed(t) {
			continue
		}
		for _, w := range words {
			if !mariaIndexed(w) {
				continue
			}
			if w == t || (prefix && strings.HasPrefix(w, t)) {
				return true
			}
		}
	}
	return false
}

func mongoSearch(text, value string) bool {
	words := ftWords(text, true)
	var phrases [][]string
	var terms, not []string
	rest := value
	for {
		i := strings.Index(rest, `"`)
		if i < 0 {
			break
		}
		j := strings.Index(rest[i+1:], `"`)
		if j < 0 {
			break
		}
		phrases = append(phrases, ftWords(rest[i+1:i+1+j], true))
		rest = rest[:i] + " " + rest[i+1+j+1:]
	}
	for _, f := range strings.Fields(rest) {
		if strings.HasPrefix(f, "-") {
			not = append(not, ftWords(f[1:], true)...)
			continue
		}
		terms = append(terms, ftWords(f, true)...)
	}
	has := map[string]bool{}
	for _, w := range words {
		has[w] = true
	}
	for _, n := range not {
		if has[n] {
			return false
		}
	}
	for _, ph := range phrases {
		if !containsSeq(words, ph) {
			return false
		}
	}
	if len(phrases) > 0 && len(terms) == 0 {
		return true
	}
	for _, t := range terms {
		if has[t] {
			return true
		}
	}
	return false
}
