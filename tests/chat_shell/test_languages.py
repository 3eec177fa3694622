"""The language a text is written in, as far as its script tells (`chat_shell.languages`)."""

from __future__ import annotations

from chat_shell.languages import cjk_language, dominant_cjk_language


def test_chinese_holding_an_id_a_path_and_an_english_name_is_chinese() -> None:
    text = "我把议程草稿保存在/srv/events/2027/agenda_v5.md，编号QZ-79694-J，联系人Tobias。"
    assert cjk_language(text) == "zh"


def test_english_holding_a_chinese_name_is_no_cjk_language() -> None:
    assert cjk_language("Our contact at the venue is 林晓雯, she answers emails quickly.") is None


def test_kana_make_japanese_and_hangul_korean() -> None:
    assert cjk_language("明日は東京で会議があります。") == "ja"
    assert cjk_language("내일 서울에서 회의가 있습니다.") == "ko"


def test_the_language_of_most_messages_wins_and_one_pasted_document_weighs_as_one() -> None:
    document = "The quarterly report covers revenue, costs and the hiring plan. " * 50
    assert dominant_cjk_language(["帮我总结一下这份报告。", document, "重点是成本部分。"]) == "zh"
    assert dominant_cjk_language(["Summarize this.", "好的", "Thanks, and the costs?"]) is None
    assert dominant_cjk_language([]) is None
