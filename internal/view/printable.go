/*
Copyright The itemops Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package view

import (
	"strings"
	"unicode"

	"github.com/charmbracelet/x/ansi"
)

// Printable is s as a terminal may show it: escape sequences (colours, a
// moved cursor, a changed window title, a hyperlink) removed, other control
// characters and the bidirectional overrides that reorder text shown as
// "?", tabs and line breaks as spaces. Plugins and whoever writes the
// bucket control an operation's error, units and identifiers, and
// kubectl itemops prints them to terminals.
func Printable(s string) string {
	s = ansi.Strip(s)
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return ' '
		case unicode.IsControl(r), r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
			return '?'
		}
		return r
	}, s)
}
