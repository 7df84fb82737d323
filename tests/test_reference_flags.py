"""The KVCacheManager optimizer's command lines, as its scripts and README write them,
through our real parsers: each parses to the option it means. The ones not supported yet
were listed as strict xfails until each was supported; none is left."""

from __future__ import annotations

import shlex

import pytest

from litehit_service.cli import build_parser

SUPPORTED = [
    # optimizer_run.py -c CFG --draw-chart
    ("optimize -c cfg.json --draw-chart", {"config_option": "cfg.json", "draw_chart": True}),
    ("optimize cfg.json", {"config": "cfg.json"}),
    ("optimize -c cfg.json --draw-chart --export-lifecycle", {"export_lifecycle": True}),
    ("optimize -c cfg.json --draw-chart --fast-chart", {"fast_chart": True}),
    ("tradeoff -c cfg.json", {"config_option": "cfg.json"}),
    ("lifecycle -c cfg.json", {"config_option": "cfg.json"}),
    # export_radix_tree.py
    (
        "export-tree -c cfg.json --hot-nodes 20 --show-blocks --max-blocks 5 --stats-only "
        "--layout tree --node-size 300",
        {
            "top_k": 20,
            "show_blocks": True,
            "max_blocks": 5,
            "stats_only": True,
            "layout": "tree",
            "node_size": 300,
        },
    ),  # fmt: skip
    # the converter: -i IN -o OUT -f FORMAT --mode optimizer, underscore names
    (
        "convert -i log.jsonl -o out.jsonl -f publisher_log --mode optimizer",
        {
            "input_options": ["log.jsonl"],
            "output": "out.jsonl",
            "source_format": "publisher-log",
            "mode": "optimizer",
        },
    ),  # fmt: skip
    ("convert -i a.csv -o out.jsonl -f qwen_bailian", {"source_format": "qwen-bailian"}),
    # tradeoff.py --hit-rate-type
    ("tradeoff -c cfg.json --hit-rate-type remote", {"hit_rate_type": "remote"}),
    ("tradeoff -c cfg.json --hit-rate-type all", {"hit_rate_type": "all"}),
    (
        "convert -i prompts.jsonl -o out.jsonl -f text --mode optimizer "
        "--tokenizer-path model/deepseek-v3 --time-field time --content-field prompt_messages "
        "--instance-id my_text_instance --instance-block-sizes my_text_instance:32 "
        "--model-name deepseek-v3 --num-workers 4",
        {
            "source_format": "text",
            "tokenizer_path": "model/deepseek-v3",
            "time_field": "time",
            "content_field": "prompt_messages",
            "instance": "my_text_instance",
            "instance_block_sizes": {"my_text_instance": 32},
            "model_name": "deepseek-v3",
            "max_workers": 4,
        },
    ),  # fmt: skip
]


def _parse(line: str):
    return build_parser().parse_args(shlex.split(line))


@pytest.mark.parametrize(("line", "means"), SUPPORTED, ids=[s[0] for s in SUPPORTED])
def test_a_reference_command_line_parses_to_what_it_means(line: str, means: dict) -> None:
    args = _parse(line)
    assert {name: getattr(args, name) for name in means} == means
