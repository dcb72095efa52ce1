"""The palette reads for colour-blind readers, and no figure tells categories apart by colour alone.

Colour-vision deficiency is simulated with the matrices of Machado, Oliveira and Fernandes (2009),
"A Physiologically-based Model for Simulation of Color Vision Deficiency", IEEE TVCG 15(6), at
severity 1.0 (dichromacy), applied to linear RGB. Distances are CIE 1976 (L*a*b*, D65) units: 2.3
is a just-noticeable difference; the figures ask for at least 25 between every two categories.
"""
import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from pagedkv_lib import palette  # noqa: E402
from pagedkv_lib.figure_text import described  # noqa: E402

MACHADO = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
}
VISIONS = {"typical": np.eye(3), **{k: np.array(m) for k, m in MACHADO.items()}}
MIN_DELTA_E = 25.0

CATEGORIES = {**palette.COLORS, "shared": palette.SHARED}
"""Every category a figure fills: the memory categories and the shared block."""


def linear_rgb(hex_colour: str) -> np.ndarray:
    c = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def lab(linear: np.ndarray) -> np.ndarray:
    """CIELAB (D65) of a linear sRGB colour."""
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    t = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def seen(hex_colour: str, vision: str) -> np.ndarray:
    """The CIELAB colour a reader with ``vision`` sees for ``hex_colour``."""
    return lab(np.clip(VISIONS[vision] @ linear_rgb(hex_colour), 0, 1))


def delta_e(a: str, b: str, vision: str) -> float:
    return float(np.linalg.norm(seen(a, vision) - seen(b, vision)))


def test_the_simulation_matches_known_dichromat_confusions():
    """The simulation is not a no-op: red and green, which protanopes and deuteranopes confuse, come
    close (and stay far apart for typical vision); white stays white under every matrix."""
    red, green = "#CC3311", "#558800"
    assert delta_e(red, green, "typical") > 60
    assert delta_e(red, green, "protanopia") < 25 and delta_e(red, green, "deuteranopia") < 25
    for vision in VISIONS:
        assert delta_e("#FFFFFF", "#FFFFFF", vision) == 0
        assert np.allclose(VISIONS[vision] @ np.ones(3), 1, atol=1e-3), "a matrix must keep white white"


@pytest.mark.parametrize("vision", list(VISIONS))
def test_every_two_categories_stay_apart_under_each_colour_vision(vision):
    for (na, a), (nb, b) in itertools.combinations(CATEGORIES.items(), 2):
        d = delta_e(a, b, vision)
        assert d >= MIN_DELTA_E, f"{na} {a} and {nb} {b} are {d:.1f} apart under {vision} (need {MIN_DELTA_E})"


def test_a_confusable_palette_fails_the_check():
    """The old token-state blue and external-fragmentation purple: distinct to typical vision, one colour to a protanope."""
    assert delta_e("#4C72B0", "#8172B3", "typical") > 15
    assert delta_e("#4C72B0", "#8172B3", "protanopia") < MIN_DELTA_E


def test_every_category_has_its_own_hatching_beside_its_colour():
    hatched = {k: v for k, v in palette.HATCHES.items() if k not in ("token_states", "free")}
    assert len(set(hatched.values())) == len(hatched) and all(hatched.values())
    assert set(palette.COLORS) | {"shared", "free"} == set(palette.HATCHES)


def test_contrast_follows_wcag_and_labels_on_fills_reach_4_5_to_1():
    assert palette.contrast("#000000", "#FFFFFF") == pytest.approx(21)
    assert palette.contrast("#767676", "#FFFFFF") == pytest.approx(4.54, abs=0.01)   # WCAG's grey on white
    for fill in [*CATEGORIES.values(), *palette.OWNERS, palette.CACHED]:
        assert palette.contrast(fill, palette.text_on(fill)) >= 4.5, fill


def _hatches(ax) -> dict:
    """``{gid: hatch}`` of the patches of ``ax`` that carry a category gid."""
    return {p.get_gid(): p.get_hatch() for p in ax.patches if p.get_gid()}


def test_the_figures_draw_categories_with_their_hatching_and_owners_by_name():
    from pagedkv_lib.lesson import replay, viz
    from pagedkv_lib.ledger import PAGE_BATCH

    arena = replay.play_contiguous(PAGE_BATCH, "max", 32, steps=1, num_slots=112)
    ax = viz.plot_contiguous(arena, 20)
    for cat, hatch in _hatches(ax).items():
        assert (hatch or "") == palette.HATCHES[cat], cat
    plt.close(ax.figure)
    shared = replay.play_paged(PAGE_BATCH, 4, num_blocks=16)
    ax = viz.plot_block_map(shared, [r.id for r in PAGE_BATCH])
    labels = [t.get_text() for t in ax.texts]
    for rid in ("A1", "A2", "A3"):
        assert any(label.endswith(f" {rid}") for label in labels), f"no block names its owner {rid}: {labels}"
    assert "0 x3" in labels
    fills = [p for p in ax.patches if p.get_facecolor()[:3] == matplotlib.colors.to_rgb(palette.SHARED)]
    assert fills and all(p.get_hatch() == palette.HATCHES["shared"] for p in fills)
    plt.close(ax.figure)


def test_simulator_figures_tell_policies_and_categories_apart_without_colour():
    from pagedkv_lib.sim import run_policies, sharegpt_like
    from pagedkv_lib.sim.plots import plot_results

    results = run_policies(sharegpt_like(40, seed=0), progress=False)
    fig = plot_results(results)
    shares, batch = fig.axes[:2]
    styles = [(line.get_linestyle(), line.get_marker()) for line in batch.lines]
    assert len(set(styles)) == len(results), f"two policies share a dash and marker: {styles}"
    hatches = {p.get_hatch() for p in shares.patches}
    assert {palette.HATCHES[c] or None for c in ("reservation", "internal_fragmentation")} <= hatches
    assert len(described(fig)) == 2, "both panels carry their data as text"
    plt.close(fig)
