"""The one plotting style: styled figures written on leaving the block, a colour per method."""

from specjax.bench import plotstyle


def test_figure_is_styled_and_written(tmp_path):
    path = tmp_path / "sub" / "fig.png"
    with plotstyle.figure(path, ncols=2) as (fig, axes):
        assert len(axes) == 2
        assert tuple(fig.get_size_inches()) == (2 * plotstyle.PANEL[0], plotstyle.PANEL[1])
        axes[0].plot([0, 1], [0, 1], color=plotstyle.method_color("ngram"))
        assert axes[0].xaxis.get_gridlines()[0].get_visible()  # RC applies inside the block
        assert not path.exists()
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_method_colours_are_stable():
    assert plotstyle.method_color("draft_model") == plotstyle.METHOD_COLORS["draft_model"]
    assert plotstyle.method_color("my_method") == plotstyle.method_color("my_method")
    assert plotstyle.method_color("my_method") not in plotstyle.METHOD_COLORS.values()
