// The tables of the built-in corpus. Rules are LL(1) at the word level: whatever is optional or
// alternative is decided by the next word, so the text determines the derivation. That is why
// there is no article "a" ("a"/"an" would depend on the following word) and why prepositional
// phrases attach only to verbs while "of" attaches only to nouns.
#include "k3/data/corpus_grammar.h"

#include <array>

namespace k3::data {
namespace {

const ProductionSpec kProductions[] = {
    {"Document", 1, "Paragraph MoreParagraphs"},
    {"MoreParagraphs", 3, "'\n' Paragraph MoreParagraphs"},
    {"MoreParagraphs", 1, ""},
    {"Paragraph", 1, "Sentence MoreSentences"},
    {"MoreSentences", 3, "Sentence MoreSentences"},
    {"MoreSentences", 1, ""},

    {"Sentence", 14, "Statement '.'"},
    {"Sentence", 3, "Question '?'"},
    {"Sentence", 1, "Exclamation '!'"},

    {"Statement", 1, "Opening Clause MoreClauses"},
    {"Opening", 1, "TimePhrase ','"},
    {"Opening", 4, ""},
    {"TimePhrase", 3, "TimeAdverb"},
    {"TimePhrase", 1, "'at' TimeOfDay"},
    {"TimePhrase", 1, "'in' 'the' PartOfYear"},
    {"MoreClauses", 1, "',' Conjunction Clause MoreClauses"},
    {"MoreClauses", 4, ""},
    {"Clause", 1, "Subject Predicate"},

    {"Predicate", 6, "PastTransitive Object Manner Place"},
    {"Predicate", 3, "PastIntransitive Manner Place"},
    {"Predicate", 2, "PresentTransitive Object Manner Place"},
    {"Predicate", 1, "PresentIntransitive Manner Place"},
    {"Predicate", 2, "'was' Adjective Place"},
    {"Predicate", 1, "'said' 'that' Clause"},
    {"Manner", 1, "MannerAdverb"},
    {"Manner", 3, ""},
    {"Place", 1, "Preposition Object"},
    {"Place", 2, ""},

    {"Question", 1, "QuestionWord Auxiliary Subject BareVerbPhrase"},
    {"QuestionWord", 2, "WhWord"},
    {"QuestionWord", 3, ""},
    {"BareVerbPhrase", 2, "BareTransitive Object Manner Place"},
    {"BareVerbPhrase", 1, "BareIntransitive Manner Place"},

    {"Exclamation", 1, "Interjection ',' Subject 'was' 'so' Adjective"},

    {"Subject", 5, "NounPhrase"},
    {"Subject", 3, "Name"},
    {"Subject", 2, "SubjectPronoun"},
    {"Object", 6, "NounPhrase"},
    {"Object", 2, "Name"},
    {"Object", 1, "ObjectPronoun"},
    {"NounPhrase", 1, "Determiner Adjectives Noun Possessor"},
    {"Adjectives", 1, "Adjective Adjectives"},
    {"Adjectives", 3, ""},
    {"Possessor", 1, "'of' Owner"},
    {"Possessor", 6, ""},
    {"Owner", 2, "NounPhrase"},
    {"Owner", 1, "Name"},
};

// Word lists, most frequent first.
constexpr std::string_view kNouns =
    "miller lantern bridge river mill road house garden door window table letter boat harbor "
    "village forest hill valley castle tower field market candle book key box basket cart "
    "horse dog cat bird fox wolf owl goose baker smith farmer sailor teacher doctor painter "
    "weaver fisherman shepherd king queen child stranger neighbor traveller merchant soldier "
    "captain cook gardener lamp clock bell chair bench wall gate fence roof stone tree flower "
    "apple bread cheese coat hat boot ring coin rope ladder bucket barrel kettle cup plate "
    "spoon knife feather shell mirror blanket pillow island mountain meadow orchard chapel "
    "library kitchen cellar attic stable well";
constexpr std::string_view kAdjectives =
    "old quiet young small tall dark bright cold warm green red grey golden silent heavy "
    "gentle ancient narrow wide broken hidden empty wooden tired clever brave proud strange "
    "lonely distant careful happy sad little busy patient curious famous humble kind honest "
    "sleepy hungry wet dry tidy dusty rusty shiny crooked hollow round sharp soft smooth "
    "rough";
constexpr std::string_view kNames =
    "Anna Tom Clara Hugo Marta Felix Ida Oskar Lena Paul Greta Simon Nora Jonas Elsa Victor "
    "Rosa Emil Alma Karl Leo Vera Otto Hanna Milo Ada Bruno Lotte Theo Mira";
constexpr std::string_view kDeterminers =
    "the this that every each one my his our your their another no";
constexpr std::string_view kSubjectPronouns = "he she";
constexpr std::string_view kObjectPronouns = "him them us me";
constexpr std::string_view kMannerAdverbs =
    "quietly slowly quickly carefully gently softly loudly happily sadly bravely calmly "
    "silently eagerly patiently proudly";
constexpr std::string_view kPrepositions =
    "to across under near behind beside through toward over past along into onto from with "
    "without beyond above below around inside";
constexpr std::string_view kTimeAdverbs =
    "yesterday today later afterwards meanwhile eventually suddenly finally";
constexpr std::string_view kTimesOfDay = "dawn dusk noon midnight night sunrise sunset";
constexpr std::string_view kPartsOfYear = "morning evening afternoon spring summer autumn winter";
constexpr std::string_view kConjunctions = "and but while because yet";
constexpr std::string_view kAuxiliaries = "did will could should would can must might";
constexpr std::string_view kWhWords = "where why when how";
constexpr std::string_view kInterjections = "oh ah alas indeed truly";

// Verbs as (base, third person present, past), most frequent first.
using VerbForms = std::array<std::string_view, 3>;
constexpr VerbForms kTransitiveVerbs[] = {
    {"carry", "carries", "carried"},   {"find", "finds", "found"},
    {"open", "opens", "opened"},       {"close", "closes", "closed"},
    {"paint", "paints", "painted"},    {"mend", "mends", "mended"},
    {"follow", "follows", "followed"}, {"watch", "watches", "watched"},
    {"visit", "visits", "visited"},    {"build", "builds", "built"},
    {"bring", "brings", "brought"},    {"hold", "holds", "held"},
    {"keep", "keeps", "kept"},         {"sell", "sells", "sold"},
    {"buy", "buys", "bought"},         {"leave", "leaves", "left"},
    {"lift", "lifts", "lifted"},       {"pull", "pulls", "pulled"},
    {"push", "pushes", "pushed"},      {"wash", "washes", "washed"},
    {"fix", "fixes", "fixed"},         {"fill", "fills", "filled"},
    {"guard", "guards", "guarded"},    {"greet", "greets", "greeted"},
    {"call", "calls", "called"},       {"help", "helps", "helped"},
    {"hide", "hides", "hid"},          {"drop", "drops", "dropped"},
    {"lose", "loses", "lost"},         {"throw", "throws", "threw"},
    {"catch", "catches", "caught"},    {"draw", "draws", "drew"},
    {"send", "sends", "sent"},         {"take", "takes", "took"},
    {"show", "shows", "showed"},       {"remember", "remembers", "remembered"},
    {"count", "counts", "counted"},    {"clean", "cleans", "cleaned"},
};
constexpr VerbForms kIntransitiveVerbs[] = {
    {"sleep", "sleeps", "slept"},      {"sing", "sings", "sang"},
    {"wait", "waits", "waited"},       {"laugh", "laughs", "laughed"},
    {"rest", "rests", "rested"},       {"wander", "wanders", "wandered"},
    {"listen", "listens", "listened"}, {"travel", "travels", "travelled"},
    {"work", "works", "worked"},       {"dance", "dances", "danced"},
    {"smile", "smiles", "smiled"},     {"run", "runs", "ran"},
    {"swim", "swims", "swam"},         {"arrive", "arrives", "arrived"},
    {"shiver", "shivers", "shivered"}, {"whisper", "whispers", "whispered"},
    {"return", "returns", "returned"}, {"wake", "wakes", "woke"},
    {"fall", "falls", "fell"},         {"sit", "sits", "sat"},
    {"stay", "stays", "stayed"},       {"pause", "pauses", "paused"},
    {"rise", "rises", "rose"},
};

std::vector<std::string_view> verb_form(std::span<const VerbForms> verbs, int form) {
  std::vector<std::string_view> words;
  for (const VerbForms& v : verbs) words.push_back(v[form]);
  return words;
}

std::vector<WordClassSpec> word_classes() {
  enum Form { kBase = 0, kPresent = 1, kPast = 2 };
  return {
      {"Noun", split_on_spaces(kNouns)},
      {"Adjective", split_on_spaces(kAdjectives)},
      {"Name", split_on_spaces(kNames)},
      {"Determiner", split_on_spaces(kDeterminers)},
      {"SubjectPronoun", split_on_spaces(kSubjectPronouns)},
      {"ObjectPronoun", split_on_spaces(kObjectPronouns)},
      {"MannerAdverb", split_on_spaces(kMannerAdverbs)},
      {"Preposition", split_on_spaces(kPrepositions)},
      {"TimeAdverb", split_on_spaces(kTimeAdverbs)},
      {"TimeOfDay", split_on_spaces(kTimesOfDay)},
      {"PartOfYear", split_on_spaces(kPartsOfYear)},
      {"Conjunction", split_on_spaces(kConjunctions)},
      {"Auxiliary", split_on_spaces(kAuxiliaries)},
      {"WhWord", split_on_spaces(kWhWords)},
      {"Interjection", split_on_spaces(kInterjections)},
      {"BareTransitive", verb_form(kTransitiveVerbs, kBase)},
      {"PresentTransitive", verb_form(kTransitiveVerbs, kPresent)},
      {"PastTransitive", verb_form(kTransitiveVerbs, kPast)},
      {"BareIntransitive", verb_form(kIntransitiveVerbs, kBase)},
      {"PresentIntransitive", verb_form(kIntransitiveVerbs, kPresent)},
      {"PastIntransitive", verb_form(kIntransitiveVerbs, kPast)},
  };
}

}  // namespace

const Grammar& builtin_grammar() {
  static const Grammar grammar(kProductions, word_classes(), "Document");
  return grammar;
}

}  // namespace k3::data
