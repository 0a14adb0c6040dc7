"""No network, no heavy imports: importing the scorer loads neither nltk nor langdetect, and a
missing punkt_tab is a clear error instead of a download."""

from __future__ import annotations

from tests.support import run_python


def test_import_is_light():
    proc = run_python(
        """
        import sys
        import ifdistill.benchmarks.ifeval, ifdistill.benchmarks.instruction_following, ifdistill.cli.score, ifdistill.benchmarks.instruction_following.stats
        heavy = [m for m in ("nltk", "langdetect", "lm_eval", "numpy", "torch") if m in sys.modules]
        print(heavy)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_finding_every_instruction_table_is_light():
    """The scorer's lookup asks the benchmark registry, which imports every benchmark's registration: none
    of them loads an engine, Hydra or numpy for it."""
    proc = run_python(
        """
        import sys
        from ifdistill.benchmarks.instruction_following.lookup import all_instructions
        n = len(all_instructions())
        heavy = [m for m in ("nltk", "langdetect", "lm_eval", "numpy", "torch", "hydra", "omegaconf") if m in sys.modules]
        print(n, heavy)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "176 []"  # IFEval 25, IFBench 58, M-IFEval 93 (es 30, fr 30, ja 33)


def test_missing_punkt_is_a_clear_error_and_never_downloads(tmp_path):
    proc = run_python(
        """
        import ifdistill.paths as paths
        paths.find_nltk_data = lambda: None          # as if no folder held punkt_tab
        from ifdistill.benchmarks.instruction_following import score_response
        try:
            score_response("One. Two.", ["length_constraints:number_sentences"],
                           [{"num_sentences": 1, "relation": "at least"}])
        except paths.MissingResourceError as exc:
            print("MISSING:", exc)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "MISSING:" in proc.stdout and "punkt_tab" in proc.stdout


def test_nltk_lookup_failure_is_translated(tmp_path):
    empty = tmp_path / "nltk_data"
    (empty / "tokenizers" / "punkt_tab" / "english").mkdir(parents=True)  # looks right, holds nothing
    proc = run_python(
        f"""
        import ifdistill.paths as paths
        paths.find_nltk_data = lambda: paths.Path({str(empty)!r})
        import nltk
        nltk.data.path[:] = [{str(empty)!r}]
        def no_download(*a, **k):
            raise AssertionError("nltk.download was called")
        nltk.download = no_download
        from ifdistill.benchmarks.instruction_following import text_analysis
        try:
            text_analysis.count_sentences("One. Two.")
        except paths.MissingResourceError as exc:
            print("MISSING:", exc)
        """,
        {"NLTK_DATA": str(empty)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "MISSING:" in proc.stdout


def test_rows_are_validated_before_anything_is_scored():
    proc = run_python(
        """
        import sys
        from ifdistill.benchmarks.instruction_following import InvalidRowError, score_rows
        good = {"prompt": "p", "instruction_id_list": ["length_constraints:number_sentences"],
                "kwargs": [{"num_sentences": 1, "relation": "at least"}], "response": "One. Two."}
        try:
            score_rows([good, dict(good, response=None)])
        except InvalidRowError as exc:
            print(exc.line, exc.field, "nltk" in sys.modules)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "response", "False"]
