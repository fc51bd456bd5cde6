#include "k3/data/corpus_text.h"

#include <algorithm>

#include "k3/base/error.h"

namespace k3::data {
namespace {

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string capitalize(std::string word) {
  if (word[0] >= 'a' && word[0] <= 'z') word[0] = static_cast<char>(word[0] - 'a' + 'A');
  return word;
}

std::string printable(const std::string& terminal) { return terminal == "\n" ? "\\n" : terminal; }

Error text_error(const std::string& terminal, const std::string& what) {
  return Error("corpus text: " + what,
               ErrorContext{"", "terminal '" + printable(terminal) + "'", -1});
}

}  // namespace

CorpusText::CorpusText(const Grammar& grammar) : grammar_(grammar) {
  const int n = grammar.num_terminals();
  capitalized_.resize(n);
  is_word_.assign(n, 0);
  ends_sentence_.assign(n, 0);
  charged_bytes_.assign(n, 0);
  for (int t = 0; t < n; ++t) {
    const std::string& text = grammar.terminal(t);
    if (std::all_of(text.begin(), text.end(), is_letter)) {
      is_word_[t] = 1;
      charged_bytes_[t] = static_cast<int>(text.size()) + 1;
      capitalized_[t] = capitalize(text);
      auto [it, fresh] = capitalized_ids_.emplace(capitalized_[t], t);
      if (!fresh) throw text_error(text, "capitalizes like '" + grammar.terminal(it->second) + "'");
    } else if (text.size() == 1 &&
               std::string_view(",.;:!?").find(text[0]) != std::string_view::npos) {
      charged_bytes_[t] = 1;
      ends_sentence_[t] = text == "." || text == "!" || text == "?";
    } else if (text == "\n") {
      ends_sentence_[t] = 1;
    } else {
      throw text_error(text, "expected a word of ASCII letters, one of , . ; : ! ? or a newline");
    }
  }
  auto all_words = [&](const std::vector<int>& ts) {
    return std::all_of(ts.begin(), ts.end(), [&](int t) { return t < n && is_word_[t]; });
  };
  if (!all_words(grammar.starting_terminals()))
    throw Error("corpus text: every document must start with a word",
                ErrorContext{"", grammar.nonterminal(grammar.start()), -1});
  const int newline = grammar.find_terminal("\n");
  if (newline >= 0 && !all_words(grammar.followers(newline)))
    throw text_error("\n", "a paragraph break must be followed by a word");
}

bool CorpusText::starts_sentence(int previous_terminal) const {
  return previous_terminal < 0 || ends_sentence_[previous_terminal];
}

void CorpusText::render(std::span<const int> terminals, std::string& out) const {
  int previous = -1;
  for (int t : terminals) {
    if (is_word_[t]) {
      if (previous >= 0 && grammar_.terminal(previous) != "\n") out += ' ';
      out += starts_sentence(previous) ? capitalized_[t] : grammar_.terminal(t);
    } else {
      out += grammar_.terminal(t);
    }
    previous = t;
  }
}

std::string CorpusText::render(std::span<const int> terminals) const {
  std::string out;
  render(terminals, out);
  return out;
}

std::vector<int> CorpusText::read(std::string_view text) const {
  std::vector<int> terminals;
  int previous = -1;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == ' ') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && is_letter(text[end])) ++end;
    int t = -1;
    if (end > i) {
      const std::string word(text.substr(i, end - i));
      if (starts_sentence(previous)) {
        auto it = capitalized_ids_.find(word);
        t = it == capitalized_ids_.end() ? -1 : it->second;
      } else {
        t = grammar_.find_terminal(word);
      }
      if (t < 0)
        throw Error("corpus text: unknown word '" + word + "' at byte " + std::to_string(i));
    } else {
      end = i + 1;
      t = grammar_.find_terminal(text.substr(i, 1));
      if (t < 0)
        throw Error("corpus text: unexpected byte " +
                    std::to_string(static_cast<unsigned char>(text[i])) + " at byte " +
                    std::to_string(i));
    }
    terminals.push_back(t);
    previous = t;
    i = end;
  }
  return terminals;
}

}  // namespace k3::data
