"""SSE parsing of streaming chat completions: chunk boundaries, keep-alives, [DONE], errors, usage."""

import json
from pathlib import Path

import pytest

from ansible_collections.gpulab.inference.plugins.module_utils.sse import (
    SseError,
    SseParser,
    StreamRecord,
    read_chat_chunk,
)

FIXTURES = Path(__file__).resolve().parents[3] / 'unit' / 'fixtures' / 'llm_benchmark'


def chunk(delta=None, finish_reason=None, **extra):
    payload = {'choices': [] if delta is None else [{'index': 0, 'delta': delta, 'finish_reason': finish_reason}],
               'object': 'chat.completion.chunk'}
    payload.update(extra)
    return 'data: %s\n\n' % json.dumps(payload)


STREAM = (
    chunk({'role': 'assistant', 'content': None})
    + ': ping\n\n'
    + chunk({'reasoning_content': 'Let me think.'})
    + chunk({'content': 'Red'})
    + chunk({'content': ', blue'}, finish_reason='length')
    + chunk(usage={'completion_tokens': 3, 'prompt_tokens': 12, 'total_tokens': 15},
            timings={'predicted_n': 3, 'predicted_ms': 20.0, 'predicted_per_second': 150.0})
    + 'data: [DONE]\n\n'
).encode()


def parse_in_pieces(data, size):
    parser = SseParser()
    events = []
    for start in range(0, len(data), size):
        events.extend(parser.feed(data[start:start + size]))
    events.extend(parser.close())
    return parser, events


@pytest.mark.parametrize('size', [1, 2, 7, 64, len(STREAM)])
def test_events_are_the_same_whatever_the_cut(size):
    parser, events = parse_in_pieces(STREAM, size)
    assert len(events) == 6
    assert parser.comments == 1
    assert events[-1] == {'event': None, 'data': '[DONE]'}
    assert json.loads(events[2]['data'])['choices'][0]['delta'] == {'content': 'Red'}


def test_crlf_and_cr_line_ends_and_multi_line_data():
    parser, events = parse_in_pieces(b'data: {"a":\r\ndata: 1}\r\n\r\nevent: error\rdata: x\r\r', 3)
    assert events == [{'event': None, 'data': '{"a":\n1}'}, {'event': 'error', 'data': 'x'}]
    assert parser.comments == 0


def test_a_last_event_without_its_blank_line_is_kept_at_close():
    _parser, events = parse_in_pieces(b'data: [DONE]', 5)
    assert events == [{'event': None, 'data': '[DONE]'}]


def test_record_counts_text_chunks_only_and_keeps_usage_and_timings():
    record = StreamRecord(start=10.0)
    _parser, events = parse_in_pieces(STREAM, 9)
    for number, event in enumerate(events):
        record.add(event, 10.0 + number)
    # the role chunk (t=10) and the usage chunk (t=14) carry no text
    assert record.token_times == [11.0, 12.0, 13.0]
    assert (record.reasoning, record.content) == ('Let me think.', 'Red, blue')
    assert (record.reasoning_chunks, record.content_chunks) == (1, 2)
    assert record.usage['completion_tokens'] == 3
    assert record.timings['predicted_per_second'] == 150.0
    assert record.finish_reason == 'length'
    assert record.done and record.end == 15.0 and record.error is None


def test_vllm_reasoning_field():
    parsed = read_chat_chunk({'event': None, 'data': json.dumps(
        {'choices': [{'index': 0, 'delta': {'reasoning': 'hmm'}, 'finish_reason': None}]})})
    assert parsed['reasoning'] == 'hmm' and parsed['content'] == ''


def test_error_event_in_the_data_and_as_an_event_type():
    assert read_chat_chunk({'event': None, 'data': '{"error": {"code": 500, "message": "boom"}}'}) == \
        {'kind': 'error', 'message': 'boom'}
    assert read_chat_chunk({'event': 'error', 'data': '{"message": "overloaded"}'})['message'] == 'overloaded'
    record = StreamRecord(0.0)
    record.add({'event': None, 'data': '{"error": {"message": "boom"}}'}, 1.0)
    assert record.error == 'boom' and record.end == 1.0


def test_data_that_is_not_json_names_itself():
    with pytest.raises(SseError, match="not JSON: 'garbage'"):
        read_chat_chunk({'event': None, 'data': 'garbage'})
    with pytest.raises(SseError, match='not a JSON object'):
        read_chat_chunk({'event': None, 'data': '[1, 2]'})


def test_real_llama_server_stream_capture():
    """A stream captured from the lab-built llama-server (tests/unit/fixtures/llm_benchmark)."""
    data = (FIXTURES / 'llama-server-stream.txt').read_bytes()
    _parser, events = parse_in_pieces(data, 13)
    record = StreamRecord(0.0)
    for number, event in enumerate(events):
        record.add(event, float(number))
    assert record.done and record.error is None
    assert record.usage['completion_tokens'] == 16
    assert record.timings['predicted_n'] == 16
    assert len(record.token_times) >= 1
