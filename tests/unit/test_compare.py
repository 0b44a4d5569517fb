"""The comparison helper behind every verdict word: equal distributions give no verdict, clearly
separated ones give it, in the right direction, with n and a 95 % interval."""
import numpy as np
import pytest

from kvutils.core import compare


def test_equal_distributions_give_no_detectable_difference():
    rng = np.random.default_rng(1)
    a = rng.normal(0.5, 0.1, 16)
    b = a + rng.normal(0, 0.1, 16)  # same distribution, noise only
    r = compare.paired(a, b, "x", "y")
    assert r.verdict == compare.NO_DIFFERENCE
    assert r.ci95[0] < 0 < r.ci95[1]
    assert r.better() is None
    assert "no detectable difference" in r.sentence() and "n = 16" in r.sentence()


def test_separated_pair_gets_the_verdict_and_the_right_direction():
    rng = np.random.default_rng(2)
    a = rng.normal(0.1, 0.01, 12)
    b = a + 0.05 + rng.normal(0, 0.005, 12)  # b is worse (higher KL) on every document
    r = compare.paired(a, b, "snapkv", "random")
    assert r.verdict == compare.A_LOWER and r.n == 12
    assert r.ci95[1] < 0 and r.effect == pytest.approx(float(np.mean(a - b)))
    assert r.better(lower_is_better=True) == "snapkv"
    assert r.better(lower_is_better=False) == "random"
    assert r.sentence().startswith("snapkv beats random")


def test_two_units_can_never_earn_a_verdict():
    # 2 documents that agree in sign: the bootstrap interval excludes 0, the sign test cannot,
    # and the result says the test could not decide, not that it found no difference
    r = compare.paired([0.1, 0.2], [0.3, 0.5], "a", "b")
    assert r.p == pytest.approx(0.5) and r.verdict == compare.CANNOT and not r.separated
    assert "no verdict possible at n = 2" in r.sentence() and "no detectable" not in r.sentence()


@pytest.mark.parametrize("n", range(1, 9))
def test_the_smallest_reachable_p_decides_whether_n_can_separate(n):
    # all n differences one way: the most extreme data n units can give
    r = compare.paired([1.0 + i for i in range(n)], [0.0] * n, "a", "b")
    assert compare.smallest_p(n) == pytest.approx(2 * 0.5 ** n) and r.p == pytest.approx(min(1.0, 2 * 0.5 ** n))
    assert compare.can_separate(n) is (n >= 6)
    assert r.verdict == (compare.A_HIGHER if n >= 6 else compare.CANNOT)


def test_ranked_repeats_need_enough_of_them_and_apart():
    apart = compare.ranked([5.0, 6, 7, 8, 9], [1.0, 2, 3, 4, 4.5], "long", "short")
    assert apart.verdict == compare.A_HIGHER and apart.p == pytest.approx(2 / 252)
    mixed = compare.ranked([5.0, 1, 7, 2, 9], [1.5, 6, 3, 8, 4.5], "long", "short")
    assert mixed.verdict == compare.NO_DIFFERENCE and "no detectable difference" in mixed.clause()
    few = compare.ranked([5.0, 6, 7], [1.0, 2, 3], "long", "short")  # 2/20 = 0.1 at best
    assert few.verdict == compare.CANNOT and "no verdict possible with 3 and 3 repeats" in few.clause()
    assert compare.ranked([1.0, 2, 3, 4, 4.5], [5.0, 6, 7, 8, 9]).verdict == compare.A_LOWER


def test_identical_is_named_not_measured():
    r = compare.paired([0.1, 0.2, 0.3], [0.1, 0.2, 0.3], "adakv", "snapkv")
    assert r.verdict == compare.IDENTICAL and r.ci95 == (0.0, 0.0)
    assert "identical" in r.sentence()


def test_same_numbers_same_interval_and_round_trip():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=10), rng.normal(size=10)
    r1, r2 = compare.paired(a, b), compare.paired(a, b)
    assert r1 == r2
    assert compare.Paired.from_dict(r1.to_dict()) == r1


def test_paired_binary_is_mcnemar():
    # 10 discordant pairs all in a's favour: McNemar exact p = 2 / 2**10
    a = [1] * 10 + [1] * 20
    b = [0] * 10 + [1] * 20
    r = compare.paired_binary(a, b, "adapter", "base")
    assert r.p == pytest.approx(2 / 2**10)
    assert r.verdict == compare.A_HIGHER and r.better(lower_is_better=False) == "adapter"
    assert r.unit == "examples"


def test_against_chance():
    weak = compare.against_chance(19, 32, 0.5)  # the depth-2 probe
    assert not weak.above and weak.p > 0.05
    assert "no detectable difference from chance at n = 32" in weak.sentence()
    strong = compare.against_chance(30, 32, 0.5)
    assert strong.above and strong.ci95[0] > 0.5


def test_first_from_needs_every_later_depth():
    rates = [compare.against_chance(k, 32, 0.5) for k in (16, 30, 17, 30, 31)]
    assert compare.first_from(rates) == 3
    assert compare.first_from([compare.against_chance(16, 32, 0.5)]) is None


def test_best_names_a_winner_only_when_every_test_separates():
    rng = np.random.default_rng(4)
    base = rng.normal(1.0, 0.2, 12)
    clear = {"a": base * 0.5, "b": base, "c": base * 1.5}
    assert compare.best(clear) == ("a", ["a"])
    close = {"a": base, "b": base + rng.normal(0, 0.05, 12)}
    leader, tied = compare.best(close)
    assert leader is None and set(tied) == {"a", "b"}


def test_resampled_flips_counts_unstable_orders():
    stable = {"a": [1.0, 1.1, 0.9, 1.0], "b": [2.0, 2.1, 1.9, 2.2]}
    assert compare.resampled_flips(stable) == {"a vs b": 0.0}
    unstable = {"a": [0.0082, 0.108], "b": [0.0161, 0.027]}  # the two documents
    assert compare.resampled_flips(unstable)["a vs b"] > 0.2


@pytest.mark.parametrize("a,b", [([], []), ([1.0], [1.0, 2.0]), ([float("nan")], [1.0])])
def test_bad_input_is_named(a, b):
    with pytest.raises(ValueError, match="paired"):
        compare.paired(a, b)


def test_a_withheld_verdict_says_which_rule_withheld_it():
    # 9 of 10 differences positive (sign test p = 0.021), one large negative: the interval spans 0
    r = compare.paired([1.0] * 9 + [-100.0], [0.0] * 10, "a", "b")
    assert r.p < 0.05 and r.verdict == compare.NO_DIFFERENCE and r.ci95[0] < 0 < r.ci95[1]
    assert r.withheld() == "p is below 0.05 but the 95 % interval includes no difference, and a verdict needs both"
    assert r.sentence().endswith(r.withheld())
    few = compare.paired([1.0, 2.0], [0.0, 0.0])
    assert "whatever the data" in few.withheld() and "whatever the data" in few.sentence()
    plain = compare.paired([1.0, -1.0] * 5, [0.0] * 10)  # p = 1: nothing withheld, nothing to explain
    assert plain.withheld() == "" and plain.sentence().endswith("p = 1")


def test_a_clustered_rate_tests_the_clusters_not_the_items():
    """16 words of two items each, 24 of 32 items right: 12 words right twice, 4 wrong twice. Counted
    as 32 independent items the binomial test separates it from chance (p = 0.007); a word's two
    items are not independent, and the sign test over the 16 words does not (p = 0.077)."""
    right = [[1, 1]] * 12 + [[0, 0]] * 4
    items = compare.against_chance(24, 32, 0.5)
    words = compare.clustered_against_chance(right, 0.5)
    assert items.above and items.p == pytest.approx(0.0070, abs=5e-4)
    assert not words.above and words.p == pytest.approx(0.0768, abs=5e-4)
    assert (words.successes, words.n, words.clusters) == (24, 32, "16 words")
    lo, hi = words.ci95
    assert lo < 0.75 < hi and hi - lo > items.ci95[1] - items.ci95[0] - 0.1  # words resampled, not items
    assert "sign test over 16 words" in words.sentence()
    ties = compare.clustered_against_chance([[1, 0]] * 16, 0.5)  # every word half right: no evidence either way
    assert ties.p == 1.0 and not ties.above and not ties.below


def test_holm_adjusts_each_p_for_the_number_tested_step_down():
    assert compare.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert compare.holm([0.5]) == [0.5]
    assert compare.holm([0.001] * 3) == pytest.approx([0.003] * 3)
