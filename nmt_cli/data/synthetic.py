"""A built-in German-English corpus generated from a small grammar, with gold word alignments.

Every pair is drawn from a seeded :class:`random.Random`, so a seed fixes the corpus, and
the generator streams: any size costs the same memory. Each sentence is built as a plan
(clauses of noun phrases, a verb group, adverbs, prepositional phrases) that is realised
twice, once with German and once with English grammar. Every word carries *link ids*; a
German and an English word are aligned when they share one, which yields the gold
alignment in Pharaoh format ``i-j`` (0-based German word, 0-based English word).

The text is natural, detokenised text (``Der Hund schläft.``, ``the man's ball``), so
sacreBLEU and the demo see the kind of text a user has. Words are the whitespace tokens
of that text: punctuation joins the word before it and carries no links of its own, and
the English possessive ``'s`` joins its noun, which then has the links of both.

Grammar (about 330 lemmas, 800 German word forms):

* **Noun phrases**: 76 nouns in five kinds (person, animal, thing, food, place) with
  gender, plural and genitive forms; determiners ``der/die/das`` (case and gender:
  der/die/das/den/dem/des), ``ein`` (ein/eine/einen/einem/einer/eines), ``kein`` ("no"),
  possessives ``mein/sein/ihr/unser`` and the numerals ``zwei/drei/vier/viele``; up to
  two adjectives with weak, mixed or strong endings (``der kleine Hund``, ``einen
  kleinen Hund``, ``zwei kleine Hunde``), in the English order opinion-size-age-colour;
  dative plurals in ``-n``; a genitive possessor that English moves in front
  (``der Ball des Mannes`` -> ``the man 's ball``; ``der`` links to ``'s``).
* **Verbs**: intransitive, accusative, dative (``helfen``) and ditransitive (``geben``)
  frames, present, perfect (``hat ... gesehen`` / ``ist ... gelaufen``, the participle at
  the clause end) and modal (``kann ... sehen``); agreement with ``ich/er/sie/wir/sie``
  and noun subjects; English do-support (``does not see``, ``Does the man see ...?``).
* **Negation**: ``nicht`` after the objects (``sieht den Hund nicht`` -> ``does not see
  the dog``); an indefinite object is negated with ``kein`` instead (``sieht keinen
  Hund`` -> ``sees no dog``); ``kann nicht`` -> ``cannot``.
* **Word order**: German main clauses are verb-second, so a fronted time adverb or a
  fronted subordinate clause inverts subject and verb (``Heute sieht der Mann ...``);
  questions are verb-first; subordinate clauses (``weil/obwohl/wenn/bevor/während``,
  ``dass`` after ``sagen/glauben/...``, ``ob`` after ``fragen``) are verb-final
  (``weil der Mann den Hund gesehen hat`` -> ``because the man has seen the dog``).
  English puts frequency adverbs before the verb and time adverbs at the clause end
  (``Der Mann sieht oft den Hund`` -> ``The man often sees the dog``). Contractions link
  one German word to two English words (``im`` -> ``in the``).

Sentences have 4 to 25 words on each side; longer or shorter draws are redrawn.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import count
from typing import Iterator

GRAMMAR_VERSION = 2  # bump when the grammar changes: prepared-data fingerprints include it (2: natural text)
MIN_WORDS = 4
MAX_WORDS = 25
#: tokens written without a space before them; punctuation's own links are not word links
ATTACHED_PUNCTUATION = frozenset({".", "?", ","})
ATTACHED = ATTACHED_PUNCTUATION | {"'s"}

# ---- lexicon ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Noun:
    gender: str  # m, f, n
    singular: str
    plural: str
    genitive: str
    en_singular: str
    en_plural: str
    kind: str  # person, animal, thing, food, place


def _nouns(table: str) -> tuple[Noun, ...]:
    return tuple(Noun(*line.split()) for line in table.strip().splitlines())


NOUNS = _nouns("""
m Mann Männer Mannes man men person
f Frau Frauen Frau woman women person
n Kind Kinder Kindes child children person
n Mädchen Mädchen Mädchens girl girls person
m Lehrer Lehrer Lehrers teacher teachers person
m Arzt Ärzte Arztes doctor doctors person
m Freund Freunde Freundes friend friends person
f Schwester Schwestern Schwester sister sisters person
m Bruder Brüder Bruders brother brothers person
m Vater Väter Vaters father fathers person
f Mutter Mütter Mutter mother mothers person
m Koch Köche Kochs cook cooks person
f Tochter Töchter Tochter daughter daughters person
m Sohn Söhne Sohnes son sons person
m Onkel Onkel Onkels uncle uncles person
f Tante Tanten Tante aunt aunts person
m Fahrer Fahrer Fahrers driver drivers person
m Maler Maler Malers painter painters person
m Sänger Sänger Sängers singer singers person
m Kellner Kellner Kellners waiter waiters person
m Hund Hunde Hundes dog dogs animal
f Katze Katzen Katze cat cats animal
n Pferd Pferde Pferdes horse horses animal
m Vogel Vögel Vogels bird birds animal
f Maus Mäuse Maus mouse mice animal
m Fisch Fische Fisches fish fish animal
f Kuh Kühe Kuh cow cows animal
n Schaf Schafe Schafes sheep sheep animal
n Schwein Schweine Schweines pig pigs animal
m Esel Esel Esels donkey donkeys animal
f Ente Enten Ente duck ducks animal
m Ball Bälle Balles ball balls thing
n Buch Bücher Buches book books thing
m Tisch Tische Tisches table tables thing
m Stuhl Stühle Stuhles chair chairs thing
n Auto Autos Autos car cars thing
m Brief Briefe Briefes letter letters thing
f Tasche Taschen Tasche bag bags thing
f Lampe Lampen Lampe lamp lamps thing
n Fahrrad Fahrräder Fahrrades bicycle bicycles thing
n Bild Bilder Bildes picture pictures thing
m Schlüssel Schlüssel Schlüssels key keys thing
m Hut Hüte Hutes hat hats thing
m Schuh Schuhe Schuhes shoe shoes thing
f Uhr Uhren Uhr clock clocks thing
f Flasche Flaschen Flasche bottle bottles thing
f Kiste Kisten Kiste box boxes thing
n Boot Boote Bootes boat boats thing
f Zeitung Zeitungen Zeitung newspaper newspapers thing
n Geschenk Geschenke Geschenkes present presents thing
m Apfel Äpfel Apfels apple apples food
m Kuchen Kuchen Kuchens cake cakes food
f Suppe Suppen Suppe soup soups food
f Banane Bananen Banane banana bananas food
n Ei Eier Eies egg eggs food
f Birne Birnen Birne pear pears food
f Tomate Tomaten Tomate tomato tomatoes food
f Kartoffel Kartoffeln Kartoffel potato potatoes food
f Wurst Würste Wurst sausage sausages food
f Orange Orangen Orange orange oranges food
m Park Parks Parks park parks place
m Garten Gärten Gartens garden gardens place
n Haus Häuser Hauses house houses place
f Schule Schulen Schule school schools place
f Küche Küchen Küche kitchen kitchens place
f Stadt Städte Stadt city cities place
m Wald Wälder Waldes forest forests place
f Straße Straßen Straße street streets place
n Zimmer Zimmer Zimmers room rooms place
m Bahnhof Bahnhöfe Bahnhofs station stations place
f Kirche Kirchen Kirche church churches place
m Markt Märkte Marktes market markets place
n Dorf Dörfer Dorfes village villages place
m Fluss Flüsse Flusses river rivers place
f Brücke Brücken Brücke bridge bridges place
n Hotel Hotels Hotels hotel hotels place
""")


@dataclass(frozen=True)
class Adjective:
    stem: str
    english: str
    order: int  # English adjective order: 0 opinion/quality, 1 size, 2 age, 3 colour
    kinds: str  # noun kinds it describes, by initial: p(erson) a(nimal) t(hing) f(ood) l (place)


# stem:english:kinds, one string per English order class
ADJECTIVES = tuple(
    Adjective(stem, english, order, kinds)
    for order, table in enumerate((
        "schön:beautiful:patl hässlich:ugly:patl freundlich:friendly:pa müde:tired:pa "
        "glücklich:happy:pa traurig:sad:pa klug:clever:pa stark:strong:pa hungrig:hungry:pa "
        "lustig:funny:pat wild:wild:a billig:cheap:tfl nett:nice:pal laut:loud:patl ruhig:quiet:pal "
        "krank:sick:pa reich:rich:p arm:poor:p sauber:clean:tl schmutzig:dirty:patl kalt:cold:tfl "
        "warm:warm:tfl leer:empty:tl voll:full:tl schwer:heavy:tf frisch:fresh:f süß:sweet:fa",
        "klein:small:patfl groß:big:patfl",
        "alt:old:patfl jung:young:pa neu:new:tl",
        "rot:red:tf blau:blue:t grün:green:tf schwarz:black:at weiß:white:atl gelb:yellow:tf "
        "braun:brown:atf grau:grey:atl",
    ))
    for stem, english, kinds in (entry.split(":") for entry in table.split())
)
KIND_INITIAL = {"person": "p", "animal": "a", "thing": "t", "food": "f", "place": "l"}


@dataclass(frozen=True)
class Verb:
    frame: str  # intr, acc, dat, ditr, that (dass-clause), whether (ob-clause)
    infinitive: str
    first_singular: str
    third_singular: str
    participle: str
    auxiliary: str  # haben or sein
    en_base: str  # may be several words ("look for")
    en_third: str
    en_participle: str
    subjects: tuple[str, ...]
    objects: tuple[str, ...]


def _verbs(table: str) -> tuple[Verb, ...]:
    verbs = []
    for line in table.strip().splitlines():
        german, english, kinds = (part.split() for part in line.split("|"))
        frame, infinitive, first, third, participle, auxiliary = german
        en_base, en_third, en_participle = (" ".join(form.split("_")) for form in english)
        subjects, _, objects = " ".join(kinds).partition(" / ")
        verbs.append(Verb(frame, infinitive, first, third, participle, auxiliary,
                          en_base, en_third, en_participle,
                          tuple(subjects.split(",")), tuple(objects.split(",")) if objects else ()))
    return tuple(verbs)


# frame infinitive ich er participle auxiliary | English base, 3sg, participle | subjects / objects
VERBS = _verbs("""
intr schlafen schlafe schläft geschlafen haben | sleep sleeps slept | person,animal
intr laufen laufe läuft gelaufen sein | run runs run | person,animal
intr lachen lache lacht gelacht haben | laugh laughs laughed | person
intr warten warte wartet gewartet haben | wait waits waited | person,animal
intr arbeiten arbeite arbeitet gearbeitet haben | work works worked | person
intr spielen spiele spielt gespielt haben | play plays played | person,animal
intr singen singe singt gesungen haben | sing sings sung | person,animal
intr schwimmen schwimme schwimmt geschwommen sein | swim swims swum | person,animal
intr tanzen tanze tanzt getanzt haben | dance dances danced | person
intr weinen weine weint geweint haben | cry cries cried | person
intr kommen komme kommt gekommen sein | come comes come | person,animal
intr sitzen sitze sitzt gesessen haben | sit sits sat | person,animal
acc sehen sehe sieht gesehen haben | see sees seen | person,animal / person,animal,thing,food,place
acc finden finde findet gefunden haben | find finds found | person,animal / person,animal,thing,food
acc kaufen kaufe kauft gekauft haben | buy buys bought | person / animal,thing,food
acc suchen suche sucht gesucht haben | look_for looks_for looked_for | person,animal / person,animal,thing,food
acc lieben liebe liebt geliebt haben | love loves loved | person,animal / person,animal,food,place
acc brauchen brauche braucht gebraucht haben | need needs needed | person,animal / person,thing,food
acc tragen trage trägt getragen haben | carry carries carried | person / animal,thing,food
acc malen male malt gemalt haben | paint paints painted | person / person,animal,thing,food,place
acc waschen wasche wäscht gewaschen haben | wash washes washed | person / person,animal,thing,food
acc fangen fange fängt gefangen haben | catch catches caught | person,animal / animal,thing
acc besuchen besuche besucht besucht haben | visit visits visited | person / person,place
acc kennen kenne kennt gekannt haben | know knows known | person,animal / person,animal,place
acc bauen baue baut gebaut haben | build builds built | person / thing,place
acc öffnen öffne öffnet geöffnet haben | open opens opened | person / thing
acc verkaufen verkaufe verkauft verkauft haben | sell sells sold | person / animal,thing,food
acc essen esse isst gegessen haben | eat eats eaten | person,animal / food
acc kochen koche kocht gekocht haben | cook cooks cooked | person / food
acc vergessen vergesse vergisst vergessen haben | forget forgets forgotten | person / person,thing,place
acc verlieren verliere verliert verloren haben | lose loses lost | person / thing
acc hören höre hört gehört haben | hear hears heard | person,animal / person,animal
dat helfen helfe hilft geholfen haben | help helps helped | person,animal / person,animal
dat folgen folge folgt gefolgt sein | follow follows followed | person,animal / person,animal
dat danken danke dankt gedankt haben | thank thanks thanked | person / person
dat antworten antworte antwortet geantwortet haben | answer answers answered | person / person
ditr geben gebe gibt gegeben haben | give gives given | person / thing,food
ditr zeigen zeige zeigt gezeigt haben | show shows shown | person / thing,animal,place
ditr bringen bringe bringt gebracht haben | bring brings brought | person / thing,food
ditr schicken schicke schickt geschickt haben | send sends sent | person / thing
that sagen sage sagt gesagt haben | say says said | person
that glauben glaube glaubt geglaubt haben | believe believes believed | person
that denken denke denkt gedacht haben | think thinks thought | person
that hoffen hoffe hofft gehofft haben | hope hopes hoped | person
that wissen weiß weiß gewusst haben | know knows known | person
whether fragen frage fragt gefragt haben | ask asks asked | person
""")
CLAUSE_VERBS = tuple(v for v in VERBS if v.frame in ("intr", "acc", "dat", "ditr"))
SPEECH_VERBS = tuple(v for v in VERBS if v.frame in ("that", "whether"))

AUXILIARIES = {"haben": ("habe", "hat", "haben"), "sein": ("bin", "ist", "sind")}
# German modal (ich/er, wir/sie) -> English; the negated ones keep their meaning under nicht
MODALS = (("kann", "können", "can"), ("darf", "dürfen", "may"), ("soll", "sollen", "should"))
PRONOUNS = (("ich", "I", "1sg"), ("er", "he", "3sg"), ("sie", "she", "3sg"),
            ("wir", "we", "pl"), ("sie", "they", "pl"))
POSSESSIVES = (("mein", "my"), ("sein", "his"), ("ihr", "her"), ("unser", "our"))
NUMERALS = (("zwei", "two"), ("drei", "three"), ("vier", "four"), ("viel", "many"))
TIME_ADVERBS = (("heute", "today"), ("jetzt", "now"), ("morgens", "in the morning"),
                ("abends", "in the evening"), ("jeden Tag", "every day"),
                ("am Wochenende", "at the weekend"))
FREQUENCY_ADVERBS = (("oft", "often"), ("immer", "always"), ("selten", "rarely"),
                     ("manchmal", "sometimes"))
# preposition, case, English, kinds of noun it takes
PREPOSITIONS = (
    ("in", "dat", "in", ("place",)), ("auf", "dat", "on", ("thing",)),
    ("unter", "dat", "under", ("thing",)), ("neben", "dat", "next to", ("person", "thing", "place")),
    ("hinter", "dat", "behind", ("person", "animal", "thing", "place")),
    ("vor", "dat", "in front of", ("person", "thing", "place")),
    ("mit", "dat", "with", ("person", "animal")), ("zu", "dat", "to", ("person", "place")),
    ("ohne", "acc", "without", ("person", "animal", "thing")), ("für", "acc", "for", ("person", "animal")),
)
CONTRACTIONS = {("in", "dem"): "im", ("zu", "dem"): "zum", ("zu", "der"): "zur"}
CONJUNCTIONS = (("weil", "because"), ("obwohl", "although"), ("wenn", "if"), ("bevor", "before"),
                ("während", "while"))

# ---- inflection tables: case -> endings for (masculine, feminine, neuter, plural) -----------
DEFINITE = {"nom": ("der", "die", "das", "die"), "acc": ("den", "die", "das", "die"),
            "dat": ("dem", "der", "dem", "den"), "gen": ("des", "der", "des", "der")}
EIN_ENDINGS = {"nom": ("", "e", "", "e"), "acc": ("en", "e", "", "e"),
               "dat": ("em", "er", "em", "en"), "gen": ("es", "er", "es", "er")}
WEAK_ENDINGS = {"nom": ("e", "e", "e", "en"), "acc": ("en", "e", "e", "en"),
                "dat": ("en",) * 4, "gen": ("en",) * 4}
MIXED_ENDINGS = {"nom": ("er", "e", "es", "en"), "acc": ("en", "e", "es", "en"),
                 "dat": ("en",) * 4, "gen": ("en",) * 4}
STRONG_PLURAL_ENDINGS = {"nom": "e", "acc": "e", "dat": "en", "gen": "er"}
GENDER_SLOT = {"m": 0, "f": 1, "n": 2}

# ---- words with link ids -------------------------------------------------------------------


@dataclass(frozen=True)
class Word:
    """A token and the link ids it shares with its counterparts in the other language."""

    text: str
    links: frozenset[int]


Words = list[Word]


def _words(text: str, *links: int) -> Words:
    return [Word(token, frozenset(links)) for token in text.split()]


def _phrase(german: str, english: str, ids: Iterator[int]) -> tuple[Words, Words]:
    """Word-by-word links when both sides have as many words, else every word to every word."""
    de, en = german.split(), english.split()
    if len(de) == len(en):
        links = [next(ids) for _ in de]
        return ([Word(w, frozenset([k])) for w, k in zip(de, links)],
                [Word(w, frozenset([k])) for w, k in zip(en, links)])
    link = next(ids)
    return _words(german, link), _words(english, link)


# ---- noun phrases -------------------------------------------------------------------------


@dataclass(frozen=True)
class NounPhrase:
    noun: Noun
    plural: bool
    determiner: str  # def, indef, neg, poss, num, bare
    word: tuple[str, str] | None  # (German stem, English) of a possessive or numeral
    adjectives: tuple[Adjective, ...]
    possessor: "NounPhrase | None"
    links: tuple[int, ...]  # determiner, noun, adjectives...

    @property
    def person(self) -> str:
        return "pl" if self.plural else "3sg"


def _adjective_form(stem: str, ending: str) -> str:
    return stem + (ending[1:] if stem.endswith("e") and ending.startswith("e") else ending)


def german_np(np: NounPhrase, case: str) -> Words:
    """``der kleine Hund``, ``einem alten Mann``, ``zwei kleine Hunde`` ... in ``case``."""
    slot = 3 if np.plural else GENDER_SLOT[np.noun.gender]
    det_link, noun_link, *adj_links = np.links
    if np.determiner == "def":
        det, endings = DEFINITE[case][slot], WEAK_ENDINGS[case][slot]
    elif np.determiner in ("indef", "neg", "poss"):
        stem = {"indef": "ein", "neg": "kein"}.get(np.determiner) or np.word[0]
        det, endings = stem + EIN_ENDINGS[case][slot], MIXED_ENDINGS[case][slot]
    elif np.determiner == "num":
        stem = np.word[0]
        det = stem + STRONG_PLURAL_ENDINGS[case] if stem == "viel" else stem
        endings = STRONG_PLURAL_ENDINGS[case]
    else:  # bare plural
        det, endings = "", STRONG_PLURAL_ENDINGS[case]
    if np.plural:
        noun = np.noun.plural
        if case == "dat" and not noun.endswith(("n", "s")):
            noun += "n"
    else:
        noun = np.noun.genitive if case == "gen" else np.noun.singular
    words = _words(det, det_link)
    words += [Word(_adjective_form(a.stem, endings), frozenset([k])) for a, k in zip(np.adjectives, adj_links)]
    words.append(Word(noun, frozenset([noun_link])))
    if np.possessor is not None:
        words += german_np(np.possessor, "gen")
    return words


def english_np(np: NounPhrase) -> Words:
    """``the small dog``, ``no dogs``, ``the man 's old dog`` (article fixed to a/an later)."""
    det_link, noun_link, *adj_links = np.links
    if np.possessor is not None:
        det = _words("'s", det_link)
        words = english_np(np.possessor) + det
    else:
        english = {"def": "the", "indef": "a", "neg": "no", "bare": ""}.get(np.determiner)
        words = _words(english if english is not None else np.word[1], det_link)
    words += [Word(a.english, frozenset([k])) for a, k in zip(np.adjectives, adj_links)]
    words.append(Word(np.noun.en_plural if np.plural else np.noun.en_singular, frozenset([noun_link])))
    return words


# ---- clauses ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    german: Words
    english: Words
    person: str  # 1sg, 3sg, pl


@dataclass(frozen=True)
class Clause:
    subject: Subject
    verb: Verb
    form: str  # present, perfect, modal
    modal: tuple[str, str, str] | None
    negated: bool  # sentence negation with nicht (kein is part of an object)
    objects: tuple[tuple[Words, Words], ...]  # German middle-field order = English order
    phrase: tuple[Words, Words] | None  # prepositional phrase
    adverb: tuple[Words, Words, str] | None  # German, English, "time" or "frequency"
    verb_link: int
    finite_link: int
    negation_link: int


def _german_verb_parts(clause: Clause) -> tuple[Word, Words]:
    """(finite verb, non-finite words) of the German verb group."""
    person = {"1sg": 0, "3sg": 1, "pl": 2}[clause.subject.person]
    verb, v, f = clause.verb, clause.verb_link, clause.finite_link
    if clause.form == "present":
        finite = (verb.first_singular, verb.third_singular, verb.infinitive)[person]
        return Word(finite, frozenset([v, f])), []
    if clause.form == "perfect":
        finite, lexical = AUXILIARIES[verb.auxiliary][person], verb.participle
    else:
        singular, plural, _ = clause.modal
        finite, lexical = (singular if person < 2 else plural), verb.infinitive
    return Word(finite, frozenset([f])), [Word(lexical, frozenset([v]))]


def german_clause(clause: Clause, order: str, prefield: Words | None = None) -> Words:
    """``order``: "v2" (main clause; ``prefield`` or the subject first), "v1" (question) or
    "final" (subordinate clause: subject first, finite verb last)."""
    finite, nonfinite = _german_verb_parts(clause)
    adverb = clause.adverb
    middle: Words = []
    if adverb is not None and not (prefield is not None and adverb[0] is prefield):
        middle += adverb[0]
    for german, _ in clause.objects:
        middle += german
    if clause.negated:
        middle.append(Word("nicht", frozenset([clause.negation_link])))
    if clause.phrase is not None:
        middle += clause.phrase[0]
    subject = clause.subject.german
    if order == "final":
        return subject + middle + nonfinite + [finite]
    if order == "v1":
        return [finite] + subject + middle + nonfinite
    if prefield is None:
        return subject + [finite] + middle + nonfinite
    return prefield + [finite] + subject + middle + nonfinite


def english_clause(clause: Clause, question: bool = False, fronted_adverb: bool = False) -> Words:
    """Subject-verb-object order with do-support; frequency adverbs before the lexical verb,
    time adverbs at the end unless fronted (the caller places a fronted one)."""
    verb, v, f, n = clause.verb, clause.verb_link, clause.finite_link, clause.negation_link
    third = clause.subject.person == "3sg"
    if clause.form == "present":
        if clause.negated or question:
            auxiliary, lexical = ("does" if third else "do"), verb.en_base
        else:
            auxiliary, lexical = None, (verb.en_third if third else verb.en_base)
    elif clause.form == "perfect":
        auxiliary, lexical = ("has" if third else "have"), verb.en_participle
    else:
        auxiliary, lexical = clause.modal[2], verb.en_base
    adverb = clause.adverb
    frequency = adverb[1] if adverb is not None and adverb[2] == "frequency" else []
    verb_words = frequency + _words(lexical, v)
    negation = _words("not", n) if clause.negated else []
    if question:  # Does the man (not) see ...
        words = _words(auxiliary, f) + clause.subject.english + negation + verb_words
    elif auxiliary == "can" and clause.negated:
        words = clause.subject.english + _words("cannot", f, n) + verb_words
    else:
        words = clause.subject.english + _words(auxiliary or "", f) + negation + verb_words
    for _, english in clause.objects:
        words += english
    if clause.phrase is not None:
        words += clause.phrase[1]
    if adverb is not None and adverb[2] == "time" and not fronted_adverb:
        words += adverb[1]
    return words


# ---- sampling -----------------------------------------------------------------------------


class _Sampler:
    """Draws sentence plans; every random decision goes through ``self.rng``."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.ids = count()
        self.by_kind: dict[str, list[Noun]] = {}
        for noun in NOUNS:
            self.by_kind.setdefault(noun.kind, []).append(noun)
        self.adjectives_for = {kind: [a for a in ADJECTIVES if initial in a.kinds]
                               for kind, initial in KIND_INITIAL.items()}

    def noun(self, kinds: tuple[str, ...]) -> Noun:
        return self.rng.choice(self.by_kind[self.rng.choice(kinds)])

    def adjectives(self, noun: Noun, most: int) -> tuple[Adjective, ...]:
        """Up to ``most`` adjectives that fit ``noun``, one per order class, in English order."""
        rng = self.rng
        wanted = rng.choices(range(most + 1), weights=(5, 4, 1)[: most + 1])[0]
        fitting = self.adjectives_for[noun.kind]
        chosen = {a.order: a for a in (rng.choice(fitting) for _ in range(wanted))}
        return tuple(chosen[order] for order in sorted(chosen))

    def noun_phrase(self, kinds: tuple[str, ...], possessor: bool = False, most_adjectives: int = 2,
                    determiners: tuple[str, ...] = ("def", "def", "indef", "poss", "num", "bare")) -> NounPhrase:
        rng = self.rng
        determiner = rng.choice(determiners)
        plural = determiner in ("num", "bare") or (determiner in ("def", "poss") and rng.random() < 0.3)
        word = None
        if determiner == "poss":
            word = rng.choice(POSSESSIVES)
        elif determiner == "num":
            word = rng.choice(NUMERALS)
        owner = None
        if possessor and determiner == "def" and rng.random() < 0.15:
            owner = self.noun_phrase(("person", "animal"), most_adjectives=0, determiners=("def", "poss"))
            owner = NounPhrase(owner.noun, False, owner.determiner, owner.word, (), None, owner.links)
        noun = self.noun(kinds)
        adjectives = self.adjectives(noun, most_adjectives)
        links = tuple(next(self.ids) for _ in range(2 + len(adjectives)))
        return NounPhrase(noun, plural, determiner, word, adjectives, owner, links)

    def subject(self, kinds: tuple[str, ...]) -> Subject:
        if self.rng.random() < 0.25:
            german, english, person = self.rng.choice(PRONOUNS)
            link = next(self.ids)
            return Subject(_words(german, link), _words(english, link), person)
        np = self.noun_phrase(kinds, possessor=True)
        return Subject(german_np(np, "nom"), english_np(np), np.person)

    def prepositional_phrase(self) -> tuple[Words, Words]:
        preposition, case, english, kinds = self.rng.choice(PREPOSITIONS)
        np = self.noun_phrase(kinds, most_adjectives=1, determiners=("def", "def", "indef", "poss"))
        prep_link = next(self.ids)
        german = german_np(np, case)
        contraction = CONTRACTIONS.get((preposition, german[0].text)) if np.determiner == "def" else None
        if contraction:
            german = [Word(contraction, german[0].links | {prep_link})] + german[1:]
        else:
            german = _words(preposition, prep_link) + german
        return german, _words(english, prep_link) + english_np(np)

    def clause(self, verb: Verb, allow_time_front: bool = True) -> tuple[Clause, bool]:
        """A clause plan and whether its time adverb may be fronted."""
        rng = self.rng
        subject = self.subject(verb.subjects)
        form = rng.choices(("present", "perfect", "modal"), weights=(5, 3, 2))[0]
        negate = rng.random() < 0.25
        objects_np: list[tuple[NounPhrase, str]] = []
        if verb.frame == "ditr":
            objects_np.append((self.noun_phrase(("person", "animal"), most_adjectives=1), "dat"))
        if verb.frame in ("acc", "ditr"):
            objects_np.append((self.noun_phrase(verb.objects, possessor=True), "acc"))
        if verb.frame == "dat":
            objects_np.append((self.noun_phrase(verb.objects, possessor=True), "dat"))
        if negate and objects_np and objects_np[-1][0].determiner in ("indef", "bare"):
            last, case = objects_np[-1]
            objects_np[-1] = (NounPhrase(last.noun, last.plural, "neg", None, last.adjectives,
                                         None, last.links), case)
            negate = False  # negated by kein
        objects = tuple((german_np(np, case), english_np(np)) for np, case in objects_np)
        phrase = self.prepositional_phrase() if rng.random() < 0.35 else None
        adverb = None
        if rng.random() < 0.3:
            kind = "time" if negate or rng.random() < 0.6 else "frequency"
            table = TIME_ADVERBS if kind == "time" else FREQUENCY_ADVERBS
            adverb = (*_phrase(*rng.choice(table), self.ids), kind)
        modal = None
        if form == "modal":
            modal = rng.choice(MODALS)
        clause = Clause(subject, verb, form, modal, negate, objects, phrase, adverb,
                        next(self.ids), next(self.ids), next(self.ids))
        front = allow_time_front and adverb is not None and adverb[2] == "time" and rng.random() < 0.4
        return clause, front

    def sentence(self) -> tuple[Words, Words, str]:
        """German words, English words and the end mark of one sentence pattern: statement,
        question, main + subordinate clause (either order) or a reported clause
        (``sagt , dass`` / ``fragt , ob``)."""
        rng = self.rng
        pattern = rng.choices(("statement", "question", "main_sub", "sub_main", "reported"),
                              weights=(7, 2, 4, 3, 4))[0]
        if pattern == "statement":
            clause, front = self.clause(rng.choice(CLAUSE_VERBS))
            if front:
                de_adverb, en_adverb, _ = clause.adverb
                return (german_clause(clause, "v2", prefield=de_adverb),
                        en_adverb + english_clause(clause, fronted_adverb=True), ".")
            return german_clause(clause, "v2"), english_clause(clause), "."
        if pattern == "question":
            clause, _ = self.clause(rng.choice(CLAUSE_VERBS), allow_time_front=False)
            return german_clause(clause, "v1"), english_clause(clause, question=True), "?"
        if pattern == "reported":
            speech = rng.choice(SPEECH_VERBS)
            main = Clause(self.subject(speech.subjects), speech, rng.choice(("present", "perfect")), None, False,
                          (), None, None, next(self.ids), next(self.ids), next(self.ids))
            german_conj, english_conj = ("dass", "that") if speech.frame == "that" else ("ob", "whether")
            conj_link = next(self.ids)
            inner, _ = self.clause(rng.choice(CLAUSE_VERBS), allow_time_front=False)
            return (german_clause(main, "v2") + _words(",") + _words(german_conj, conj_link)
                    + german_clause(inner, "final"),
                    english_clause(main) + _words(english_conj, conj_link) + english_clause(inner), ".")
        german_conj, english_conj = rng.choice(CONJUNCTIONS)
        conj_link = next(self.ids)
        main, _ = self.clause(rng.choice(CLAUSE_VERBS), allow_time_front=False)
        sub, _ = self.clause(rng.choice(CLAUSE_VERBS), allow_time_front=False)
        de_sub = _words(german_conj, conj_link) + german_clause(sub, "final")
        en_sub = _words(english_conj, conj_link) + english_clause(sub)
        if pattern == "main_sub":
            return german_clause(main, "v2") + _words(",") + de_sub, english_clause(main) + en_sub, "."
        comma = next(self.ids)
        return (german_clause(main, "v2", prefield=de_sub + _words(",", comma)),
                en_sub + _words(",", comma) + english_clause(main), ".")


def _finish(words: Words) -> list[str]:
    """Choose a/an and capitalise the first word."""
    tokens = [w.text for w in words]
    for i, token in enumerate(tokens[:-1]):
        if token == "a" and tokens[i + 1][0] in "aeiou":
            tokens[i] = "an"
    tokens[0] = tokens[0][0].upper() + tokens[0][1:]
    return tokens


@dataclass(frozen=True)
class SyntheticPair:
    """A German sentence, its English translation and their gold alignment (German-English)."""

    german: str
    english: str
    alignment: str  # Pharaoh "i-j": German token i <-> English token j, 0-based


def generate(seed: int | str) -> Iterator[SyntheticPair]:
    """An endless, deterministic stream of sentence pairs for ``seed``."""
    sampler = _Sampler(random.Random(seed))
    while True:
        german, english, mark = sampler.sentence()
        end = Word(mark, frozenset([next(sampler.ids)]))
        (de_text, de_words), (en_text, en_words) = _detokenize(german + [end]), _detokenize(english + [end])
        if not (MIN_WORDS <= len(de_words) <= MAX_WORDS and MIN_WORDS <= len(en_words) <= MAX_WORDS):
            continue
        yield SyntheticPair(de_text, en_text, _alignment(de_words, en_words))


def _detokenize(tokens: Words) -> tuple[str, list[frozenset[int]]]:
    """Natural text of the tokens, and the link ids of each of its whitespace words."""
    texts = _finish(tokens)
    words: list[str] = []
    links: list[frozenset[int]] = []
    for text, token in zip(texts, tokens):
        if words and text in ATTACHED:
            words[-1] += text
            if text not in ATTACHED_PUNCTUATION:
                links[-1] |= token.links
        else:
            words.append(text)
            links.append(token.links)
    return " ".join(words), links


def _alignment(german: list[frozenset[int]], english: list[frozenset[int]]) -> str:
    """Pharaoh links between every German and English word that share a link id."""
    positions: dict[int, list[int]] = {}
    for i, word_links in enumerate(german):
        for link in word_links:
            positions.setdefault(link, []).append(i)
    pairs = {(i, j) for j, word_links in enumerate(english) for link in word_links for i in positions.get(link, ())}
    return " ".join(f"{i}-{j}" for i, j in sorted(pairs))
