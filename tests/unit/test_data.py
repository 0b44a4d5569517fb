"""Study data and the corpus: formats are contracts, and problems are named, never skipped."""
import json

import pytest
from conftest import load_cached

from kvutils.core import data

ARTICLE_WORDS = ["bank", "bat", "pitcher", "mouse", "spring", "seal", "plant", "match", "organ",
                 "pen", "key", "bark", "cell", "club", "fan", "palm"]


def test_shipped_senses_follow_the_article():
    words = data.load_senses()
    assert [w.word for w in words] == ARTICLE_WORDS
    for w in words:
        assert w.prefix == f"The {w.word}"
        assert all(len(s.references) == 3 and s.continuation.startswith(" ") for s in w.senses)
    gardens = data.load_garden_paths()
    assert [g.prefix for g in gardens] == ["The old man", "The horse raced past the barn"]
    assert len(data.prefix_pairs(words, gardens)) == 18


def _write(tmp_path, obj):
    path = tmp_path / "senses.json"
    path.write_text(json.dumps(obj))
    return path


def test_malformed_senses_list_every_offender(tmp_path):
    bad = {"prefix_template": "The {word}", "words": [
        {"word": "bank", "senses": [{"label": "river", "continuation": " x", "references": ["a bank"]}]},
        {"word": "", "senses": []},
        {"word": "bat", "senses": [{"label": "a", "continuation": " x", "references": ["a bat"]},
                                   {"label": "a", "continuation": " y", "references": ["b bat"]}]}]}
    with pytest.raises(ValueError) as err:
        data.load_senses(_write(tmp_path, bad))
    message = str(err.value)
    assert message.startswith("senses_file:")
    assert "'bank': needs exactly two" in message and "words[1]" in message and "share the label" in message


def test_not_json_and_missing_file(tmp_path):
    path = tmp_path / "s.json"
    path.write_text("{nope")
    with pytest.raises(ValueError, match="senses_file: .* is not valid JSON"):
        data.load_senses(path)
    with pytest.raises(ValueError, match="senses_file: file not found"):
        data.load_senses(tmp_path / "absent.json")


def test_words_must_be_single_tokens_and_occur_in_references(tmp_path):
    tokenizer = load_cached("tiny-llama", "float32").tokenizer
    obj = {"prefix_template": "The {word}", "words": [
        {"word": "hippopotamus", "senses": [
            {"label": "a", "continuation": " x.", "references": ["A hippopotamus swam."]},
            {"label": "b", "continuation": " y.", "references": ["A hippopotamus ate."]}]},
        {"word": "bank", "senses": [
            {"label": "river", "continuation": " x.", "references": ["We sat by the water."]},
            {"label": "money", "continuation": " y.", "references": ["The bank opened."]}]}]}
    words = data.load_senses(_write(tmp_path, obj))
    with pytest.raises(ValueError) as err:
        data.check_words_for_tokenizer(words, tokenizer, "tiny-llama")
    assert "'hippopotamus' is" in str(err.value) and "not 1" in str(err.value)
    assert "We sat by the water." in str(err.value)


def test_default_corpus_is_real_english():
    docs = data.load_corpus()
    assert len(docs) >= 24 and all(len(d.text) >= data.PYDOC_MIN_CHARS for d in docs)
    assert docs[0].id.startswith("pydoc:") and " the " in docs[0].text


def test_jsonl_and_folder_corpora(tmp_path):
    (tmp_path / "docs.jsonl").write_text(json.dumps({"text": "one two three"}) + "\n\n"
                                         + json.dumps({"text": "four  five\nsix"}) + "\n")
    docs = data.load_corpus(str(tmp_path / "docs.jsonl"))
    assert [d.text for d in docs] == ["one two three", "four five six"]
    folder = tmp_path / "txt"
    folder.mkdir()
    (folder / "b.txt").write_text("second")
    (folder / "a.txt").write_text("first")
    assert [d.id for d in data.load_corpus(str(folder))] == ["a.txt", "b.txt"]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(ValueError, match=r'corpus: .* line 1 has no "text"'):
        data.load_corpus(str(tmp_path / "bad.jsonl"))
    with pytest.raises(ValueError, match="corpus: 'nowhere'"):
        data.load_corpus("nowhere")


def test_short_document_is_named_not_skipped(tmp_path):
    tokenizer = load_cached("tiny-llama", "float32").tokenizer
    docs = [data.Document("long", "word " * 100), data.Document("tiny", "too short")]
    with pytest.raises(ValueError, match=r"prompt_tokens=32: documents too short: tiny \(\d+ tokens\)"):
        data.prompts_from_corpus(tokenizer, docs, 2, 32)
    with pytest.raises(ValueError, match="n_prompts=3, but the corpus supplies only 2"):
        data.prompts_from_corpus(tokenizer, docs, 3, 4)
    assert data.prompts_from_corpus(tokenizer, docs, 1, 32).shape == (1, 32)
