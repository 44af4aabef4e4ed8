"""A witness: a response that our IF verifier accepts for a given instruction set.

An instruction set goes into the RL data only if such a response exists; `compliant_response`
writes one from plain clauses (English, or the requested language) laid out the way each
instruction asks (title, sections, bullets, paragraphs, postscript, end phrase, quotation,
case), padded to the word and sentence counts and letter and capital-word frequencies, and
then runs `verify_ifeval` on it. None means this writer found no such response: the numbers
drawn for the set contradict each other (a letter allowed fewer times than the end phrase
holds it), and the set is drawn again. The witness proves satisfiability; it is not a good
answer to the prompt, and it is never training data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from curation.verify.ifeval import count_sentences, verify_ifeval

CLAUSES = (
    "the morning light falls on the quiet street",
    "we walked along the river after lunch",
    "good plans start with a clear goal",
    "small steps add up over time",
    "the team shared ideas during the meeting",
    "fresh bread smells wonderful in the kitchen",
    "clear writing helps readers follow the argument",
    "the old library keeps maps from many countries",
    "birds sing loudly at dawn",
    "a calm mind works fast",
    "cats nap in warm spots",
    "big dogs run around parks",
    "kids draw funny pictures",
    "our plan is short",
    "the old monk wrote short notes",
    "kids sing in rain",
    "a big cat hid by a wall",
    "you can trust this method",
    "every journey begins with a single step",
    "my brother grows tomatoes every summer",
    "the children played happily until dinner",
    "honest feedback makes everyone better",
    "simple tools often solve hard problems",
    "the city looks bright after the storm",
    "a quick walk clears my head",
    "good food brings people together",
    "music fills the empty room",
    "strong habits shape daily life",
)
"""English clauses without punctuation, chosen so that most letters are missing from some."""

LANGUAGE_SAMPLES: dict[str, tuple[str, ...]] = {
    "ar": (
        "الكلب الصغير يلعب في الحديقة",
        "الشمس تشرق فوق البيت القديم",
        "نشرب الشاي الساخن في الصباح",
        "أختي تقرأ كتابا ممتعا",
        "يتساقط الثلج بكثرة على الجبال في الشتاء",
        "يصل القطار إلى المحطة في الموعد",
    ),
    "de": (
        "der kleine hund spielt heute im garten",
        "die sonne scheint hell über dem alten haus",
        "meine schwester liest ein spannendes buch",
        "im winter fällt oft viel schnee in den bergen",
        "das essen schmeckt wirklich sehr gut",
        "die kinder lernen in der schule lesen und schreiben",
    ),
    "es": (
        "el perro pequeño juega en el jardín",
        "el sol brilla sobre la casa vieja",
        "por la mañana bebemos café caliente",
        "mi hermana lee un libro muy interesante",
        "en invierno cae mucha nieve en las montañas",
        "los niños aprenden a leer en la escuela",
    ),
    "fi": (
        "pieni koira leikkii puutarhassa",
        "aurinko paistaa vanhan talon yllä",
        "aamulla juomme kuumaa teetä",
        "siskoni lukee mielenkiintoista kirjaa",
        "talvella vuorille sataa paljon lunta",
        "lapset oppivat lukemaan koulussa",
    ),
    "fr": (
        "le petit chien joue dans le jardin",
        "le soleil brille sur la vieille maison",
        "le matin nous buvons du café chaud",
        "ma soeur lit un livre très intéressant",
        "en hiver il tombe beaucoup de neige dans les montagnes",
        "les enfants apprennent à lire à l'école",
    ),
    "hi": (
        "छोटा कुत्ता बगीचे में खेल रहा है",
        "सूरज पुराने घर के ऊपर चमक रहा है",
        "हम सुबह गरम चाय पीते हैं",
        "मेरी बहन एक दिलचस्प किताब पढ़ रही है",
        "सर्दियों में पहाड़ों पर बहुत बर्फ गिरती है",
        "बच्चे स्कूल में पढ़ना सीखते हैं",
    ),
    "it": (
        "il piccolo cane gioca nel giardino",
        "il sole splende sulla vecchia casa",
        "la mattina beviamo un caffè caldo",
        "mia sorella legge un libro molto interessante",
        "in inverno cade molta neve sulle montagne",
        "i bambini imparano a leggere a scuola",
    ),
    "ko": (
        "작은 개가 정원에서 놀고 있습니다",
        "해가 오래된 집 위에서 밝게 빛납니다",
        "우리는 아침에 따뜻한 차를 마십니다",
        "제 여동생은 재미있는 책을 읽고 있습니다",
        "겨울에는 산에 눈이 많이 내립니다",
        "아이들은 학교에서 읽기를 배웁니다",
    ),
    "pl": (
        "mały pies bawi się w ogrodzie",
        "słońce świeci jasno nad starym domem",
        "rano pijemy gorącą herbatę",
        "moja siostra czyta ciekawą książkę",
        "zimą w górach pada dużo śniegu",
        "dzieci uczą się czytać w szkole",
    ),
    "pt": (
        "o pequeno cão brinca no jardim",
        "o sol brilha sobre a casa velha",
        "de manhã bebemos café quente",
        "a minha irmã lê um livro muito interessante",
        "no inverno cai muita neve nas montanhas",
        "as crianças aprendem a ler na escola",
    ),
    "ru": (
        "маленькая собака играет в саду",
        "солнце ярко светит над старым домом",
        "утром мы пьём горячий чай",
        "моя сестра читает интересную книгу",
        "зимой в горах выпадает много снега",
        "дети учатся читать в школе",
    ),
    "sw": (
        "mbwa mdogo anacheza bustanini",
        "jua linawaka juu ya nyumba ya zamani",
        "asubuhi tunakunywa chai ya moto",
        "dada yangu anasoma kitabu kizuri",
        "chakula hiki ni kitamu sana",
        "watoto wanajifunza kusoma shuleni",
    ),
    "tr": (
        "küçük köpek bahçede oynuyor",
        "güneş eski evin üzerinde parlıyor",
        "sabahları sıcak çay içiyoruz",
        "kız kardeşim ilginç bir kitap okuyor",
        "kışın dağlara çok kar yağar",
        "çocuklar okulda okumayı öğreniyor",
    ),
    "vi": (
        "con chó nhỏ đang chơi trong vườn",
        "mặt trời chiếu sáng trên ngôi nhà cũ",
        "buổi sáng chúng tôi uống trà nóng",
        "em gái tôi đang đọc một cuốn sách hay",
        "mùa đông có nhiều tuyết trên núi",
        "trẻ em học đọc ở trường",
    ),
}
"""Plain sentences per response language; together they are detected as that language."""

LANGUAGE_LEAD = 3
"""Sentences a language witness opens with, so that language detection has enough text."""


class _NoWitness(Exception):
    """This writer cannot satisfy the set (its numbers contradict each other)."""


def compliant_response(ids: Sequence[str], kwargs: Sequence[dict[str, Any] | None]) -> str | None:
    """A response `verify_ifeval` accepts for `ids` with `kwargs`, or None if none is found."""
    spec = {i: dict(k or {}) for i, k in zip(ids, kwargs, strict=True)}
    try:
        text = _Writer(spec).write()
    except _NoWitness:
        return None
    return text if verify_ifeval(text, list(ids), list(kwargs)).passed else None


class _Writer:
    def __init__(self, spec: dict[str, dict[str, Any]]) -> None:
        self.spec = spec
        language = spec.get("language:response_language", {}).get("language")
        pool = LANGUAGE_SAMPLES[language] if language else CLAUSES
        self.lead = LANGUAGE_LEAD if language else 1
        letter = spec.get("keywords:letter_frequency")
        self.banned_letter = (
            letter["letter"].lower() if letter and letter["let_relation"] == "less than" else None
        )
        self.forbidden = [
            w.lower() for w in spec.get("keywords:forbidden_words", {}).get("forbidden_words", [])
        ]
        frequency = spec.get("keywords:frequency")
        self.limited = (
            [frequency["keyword"].lower()]
            if frequency and frequency["relation"] == "less than"
            else []
        )
        self.clauses = [c for c in pool if self._allowed(c)]
        if not self.clauses:
            raise _NoWitness("no clause avoids the banned letter and words")
        self.used = 0
        sentences = spec.get("length_constraints:number_sentences")
        self.few = bool(sentences) and sentences["relation"] == "less than"
        self.stop = "" if self.few else "."
        if "change_case:english_capital" in spec:
            self.case = "upper"
        elif "change_case:english_lowercase" in spec:
            self.case = "lower"
        else:
            self.case = None
        capitals = spec.get("change_case:capital_word_frequency")
        self.no_capitals = bool(capitals) and capitals["capital_relation"] == "less than"

    def _allowed(self, text: str) -> bool:
        low = text.lower()
        if self.banned_letter and self.banned_letter in low:
            return False
        if any(re.search(r"\b" + re.escape(w) + r"\b", low) for w in self.forbidden):
            return False
        return not any(k in low for k in self.limited)

    def clause(self) -> str:
        text = self.clauses[self.used % len(self.clauses)]
        self.used += 1
        return text

    def words(self, n: int) -> list[str]:
        found: list[str] = []
        for clause in self.clauses * n:
            found.extend(w for w in clause.split() if len(w) > 1)
            if len(found) >= n:
                break
        return found[:n]

    def sentence(self) -> str:
        return " ".join(self.clause() + self.stop for _ in range(self.lead)).rstrip()

    # ------------------------------------------------------------------ shapes

    def write(self) -> str:
        spec = self.spec
        if "detectable_format:constrained_response" in spec:
            return "My answer is yes."
        keywords = spec.get("keywords:existence", {}).get("keywords", [])
        if "detectable_format:json_format" in spec:
            return json.dumps({"answer": " ".join([*keywords, self.clause()])}, ensure_ascii=False)
        title = f"<<{' '.join(self.words(3))}>>" if "detectable_format:title" in spec else None
        if "combination:repeat_prompt" in spec:
            request = spec["combination:repeat_prompt"]["prompt_to_repeat"]
            lines = [request, *([title] if title else []), " ".join([self.sentence(), *keywords])]
            return "\n".join(lines)
        if "combination:two_responses" in spec:
            first = [*([title] if title else []), " ".join([self.sentence(), *keywords])]
            second = [self.sentence()]
            return "\n".join(first) + "\n******\n" + "\n".join(second)
        return self._general(keywords, title)

    def _general(self, keywords: list[str], title: str | None) -> str:
        spec = self.spec
        if "length_constraints:number_paragraphs" in spec:
            count = spec["length_constraints:number_paragraphs"]["num_paragraphs"]
            separator = "\n***\n"
        elif "length_constraints:nth_paragraph_first_word" in spec:
            count = spec["length_constraints:nth_paragraph_first_word"]["num_paragraphs"]
            separator = "\n\n"
        else:
            count, separator = 1, "\n\n"
        paragraphs = [[self.sentence()] for _ in range(count)]
        nth = spec.get("length_constraints:nth_paragraph_first_word")
        if nth:
            lead = paragraphs[nth["nth_paragraph"] - 1]
            lead[0] = f"{nth['first_word']} {lead[0]}"
        first = paragraphs[0]
        if title:
            first.append(title)
        sections = spec.get("detectable_format:multiple_sections")
        if sections:
            for index in range(1, sections["num_sections"] + 1):
                first += [f"{sections['section_spliter']} {index}", self.sentence()]
        bullets = spec.get("detectable_format:number_bullet_lists")
        if bullets:
            first += [f"* {self.clause()}{self.stop}" for _ in range(bullets["num_bullets"])]
        inline = list(keywords)
        frequency = spec.get("keywords:frequency")
        if frequency and frequency["relation"] == "at least":
            inline += [frequency["keyword"]] * frequency["frequency"]
        placeholders = spec.get("detectable_content:number_placeholders")
        if placeholders:
            inline += [f"[{w}]" for w in self.words(placeholders["num_placeholders"])]
        highlights = spec.get("detectable_format:number_highlighted_sections")
        if highlights:
            inline += [f"*{w}*" for w in self.words(highlights["num_highlights"])]
        capitals = spec.get("change_case:capital_word_frequency")
        if capitals and capitals["capital_relation"] == "at least":
            inline += [w.upper() for w in self.words(capitals["capital_frequency"])]
        inline_line = [self.clause(), *inline]  # a clause first: a line never opens with `*`
        last = paragraphs[-1]
        closing = []
        postscript = spec.get("detectable_content:postscript")
        if postscript:
            marker = postscript["postscript_marker"]
            marker = marker.lower() if self.no_capitals or self.case == "lower" else marker
            gap = "" if self.few and marker.endswith(".") else " "
            closing.append(f"{marker}{gap}{self.clause()}{self.stop}")
        end = spec.get("startend:end_checker")
        if end:
            closing.append(end["end_phrase"])
        padding: list[str] = []
        letter = spec.get("keywords:letter_frequency")
        for _ in range(400):
            body = [first[0], *padding, " ".join(inline_line) + self.stop, *first[1:]]
            parts = [body if p is first else p for p in paragraphs]
            if last is first:
                parts[-1] = [*parts[-1], *closing]
            else:
                parts[-1] = [*last, *closing]
            text = self._finish(separator.join("\n".join(p) for p in parts))
            grow = self._short_of(text)
            if grow == "letter" and letter:
                inline_line.append(letter["letter"] * letter["let_frequency"])
            elif grow:
                padding.append(self.sentence())
            else:
                return text
        raise _NoWitness("padding did not converge")

    def _finish(self, text: str) -> str:
        if self.case == "upper":
            text = text.upper()
        elif self.case == "lower":
            text = text.lower()
        if "startend:quotation" in self.spec:
            text = f'"{text}"'
        return text

    def _short_of(self, text: str) -> str | None:
        """What the text still lacks: more words or sentences, or the letter; None if done."""
        words = self.spec.get("length_constraints:number_words")
        count = len(re.findall(r"\w+", text))
        if words and words["relation"] == "at least" and count < words["num_words"]:
            return "words"
        if words and words["relation"] == "less than" and count >= words["num_words"]:
            raise _NoWitness("the required parts alone exceed the word limit")
        sentences = self.spec.get("length_constraints:number_sentences")
        at_least = sentences and sentences["relation"] == "at least"
        if at_least and count_sentences(text) < sentences["num_sentences"]:
            return "sentences"
        letter = self.spec.get("keywords:letter_frequency")
        if letter and letter["let_relation"] == "at least":
            found = text.lower().count(letter["letter"].lower())
            return "letter" if found < letter["let_frequency"] else None
        return None
