"""The sense-probe machinery of chapters 2 and 3: the causal identity (old-position states equal
under both senses, hence exactly 50%), the encoder's contrast, the probe on cases with a known
answer, attention rows, and the encoding of sentences (tests/signal/test_sense_probes_real.py: the
probe on a real encoder)."""
import pytest
import torch
from conftest import CAUSAL_TINY, states_of

from kvutils.core import data
from kvutils.studies.sense_probes import probes

WORDS = data.load_senses()


@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_causal_old_position_is_identical_under_both_senses_hence_exactly_chance(name):
    ws = states_of(name)
    assert all(torch.equal(pair[0], pair[1]) for pair in ws.old)  # bit-identical, every word and depth
    divergence = probes.context_divergence(ws)
    assert max(divergence["cosine_distance_max"]) == 0.0
    assert max(divergence["key_relative_diff_max"]) == 0.0
    assert divergence["states_bit_identical_words"] == len(WORDS)
    for distance in probes.DISTANCES:
        assert probes.probe(ws, distance)["old_position_pct"] == [50.0] * (ws.old.shape[2])


def test_encoder_states_and_keys_change_with_the_continuation():
    ws = states_of("tiny-bert")
    divergence = probes.context_divergence(ws)
    assert divergence["states_bit_identical_words"] == 0
    assert divergence["cosine_distance_max"][0] == 0.0  # embeddings: same token, same position
    assert min(divergence["cosine_distance_mean"][1:]) > 1e-7  # every layer after sees the continuation
    # layer 1's keys come from the embeddings (context-free); layer 2's already differ
    assert divergence["key_relative_diff_max"][0] == 0.0 and divergence["key_relative_diff_mean"][1] > 1e-4
    assert ws.new is None and ws.attention is None


def _toy(n_words=3, dim=4):
    """Centroids at orthogonal directions; each item's state is its own sense's centroid + noise."""
    g = torch.Generator().manual_seed(0)
    centroids = torch.zeros(n_words, 2, 2, dim)  # (words, senses, layers, d)
    centroids[:, 0, :, 0] = 1.0
    centroids[:, 1, :, 1] = 1.0
    noise = 0.1 * torch.randn(n_words, 2, 2, dim, generator=g)
    return centroids, centroids + noise


@pytest.mark.parametrize("distance", probes.DISTANCES)
def test_nearest_centroid_accuracy_on_known_answers(distance):
    centroids, states = _toy()
    assert probes.nearest_centroid_accuracy(states, centroids, distance).tolist() == [1.0, 1.0]
    swapped = states.flip(1)  # every item carries the other sense's state
    assert probes.nearest_centroid_accuracy(swapped, centroids, distance).tolist() == [0.0, 0.0]
    shared = states[:, :1].expand_as(states)  # one state for both senses, as at a cached position
    assert probes.nearest_centroid_accuracy(shared, centroids, distance).tolist() == [0.5, 0.5]


def test_cosine_and_euclidean_disagree_where_only_the_length_differs():
    centroids = torch.tensor([[1.0, 0.0], [0.0, 10.0]])[None, :, None]  # (1 word, 2 senses, 1 layer, 2)
    states = torch.tensor([[0.1, 0.9], [0.1, 0.9]])[None, :, None]  # direction of sense 1, length of 0
    assert probes.nearest_centroid_accuracy(states, centroids, "cosine").item() == 0.5  # both -> sense 1
    assert probes.nearest_centroid_accuracy(states, centroids, "euclidean").item() == 0.5  # both -> sense 0
    assert probes.distances(states[0, 0, 0], centroids[0, :, 0], "cosine").argmin() == 1
    assert probes.distances(states[0, 0, 0], centroids[0, :, 0], "euclidean").argmin() == 0


def test_cosine_distance_is_exactly_zero_for_equal_vectors_and_matches_one_minus_cos():
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(1))
    assert probes.cosine_distance(x, x.clone()).eq(0).all()
    y = torch.randn(5, 32, generator=torch.Generator().manual_seed(2))
    expected = 1 - torch.nn.functional.cosine_similarity(x.double(), y.double(), dim=-1)
    torch.testing.assert_close(probes.cosine_distance(x, y), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_attention_rows_sum_to_one_and_the_split_covers_them(name):
    ws = states_of(name, attention=True, keys=False)
    rows = ws.attention  # (words, senses, layers, heads, seq)
    torch.testing.assert_close(rows.sum(-1), torch.ones(rows.shape[:-1]), rtol=0, atol=1e-5)
    split = probes.attention_split(ws)
    for layer in range(rows.shape[2]):
        total = sum(split[part][layer] for part in ("continuation", "first_token", "old_word", "rest"))
        assert abs(total - 1) < 1e-5
        assert all(split[part][layer] > 0 for part in ("continuation", "first_token", "old_word"))


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m", "minilm-l6"])
def test_sentences_encode_with_the_word_and_spans_where_they_belong(name):
    from kvutils.models.loading import load_tokenizer

    tokenizer = load_tokenizer(name)
    items = probes.build_items(tokenizer, WORDS, "{prefix}{continuation} The {word}")
    for it in items:
        word_id = probes.word_token_id(tokenizer, it.word.word)
        for sense, ctx, rep in zip(it.word.senses, it.contexts, it.repeats):
            assert ctx.word == ctx.old_word == rep.old_word and ctx.ids[ctx.word] == word_id
            assert rep.word > rep.continuation[1] - 1 and rep.ids[rep.word] == word_id
            assert ctx.ids[:ctx.prefix[1]] == rep.ids[:rep.prefix[1]]
            continuation = tokenizer.decode(rep.ids[slice(*rep.continuation)])
            assert "".join(continuation.split()).lower() == "".join(sense.continuation.split()).lower()
        for sense_refs in it.references:
            assert all(r.ids[r.word] == word_id for r in sense_refs)


def test_a_word_split_into_several_tokens_is_named():
    from kvutils.models.loading import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m")
    word = data.Word("kaleidoscopically", "The kaleidoscopically",
                     tuple(data.Sense(label, " shone.", ("It was kaleidoscopically bright.",))
                           for label in ("a", "b")))
    with pytest.raises(ValueError, match="'kaleidoscopically'"):
        probes.build_items(tokenizer, [word])


@pytest.mark.parametrize("template, message", [
    ("{prefix}{continuation} The", r"must contain \{word\} exactly once"),
    ("{prefix} {word} and {word}", r"must contain \{word\} exactly once"),
    ("{prefix}{meaning} {word}", r"unknown field\(s\) \['meaning'\]"),
    ("{prefix {word}", r"is not a format string"),
])
def test_bad_repeat_templates_are_named(template, message):
    with pytest.raises(ValueError, match="repeat_template: .*" + message):
        probes.check_repeat_template(template)


def _one_row_states(weights: list[float], continuation: tuple[int, int], old_word: int) -> probes.WordStates:
    """One word, one sense, one layer, one head: a hand-made attention row over len(weights) tokens."""
    row = torch.tensor(weights, dtype=torch.float64).reshape(1, 1, 1, 1, -1)
    enc = probes.Encoded(ids=list(range(len(weights))), word=len(weights) - 1, old_word=old_word, prefix=(0, 2),
                         continuation=continuation)
    return probes.WordStates(old=None, new=None, centroids=None, prefix_keys=None, attention=row, repeats=[[enc]])


def test_attention_split_sums_each_part_from_the_weights():
    # tokens: 0 "<bos>", 1 "bank", 2-4 the continuation, 5 " The", 6 "bank" (the query)
    split = probes.attention_split(_one_row_states([0.3, 0.05, 0.1, 0.2, 0.15, 0.12, 0.08], (2, 5), 1))
    expected = {"first_token": 0.3, "old_word": 0.05, "continuation": 0.45, "rest": 0.2}
    for part, value in expected.items():
        assert split[part] == [pytest.approx(value, abs=1e-15)], part


def test_attention_split_sum_is_a_real_check_of_the_spans():
    """'rest' is summed over its own positions, so parts that overlap (here the old word is the first
    token) no longer add up to one; defined as 1 − the others, they would, whatever the spans."""
    split = probes.attention_split(_one_row_states([0.3, 0.05, 0.1, 0.2, 0.15, 0.12, 0.08], (2, 5), 0))
    total = sum(split[p][0] for p in ("continuation", "first_token", "old_word", "rest"))
    assert total == pytest.approx(1 + 0.3, abs=1e-12)
