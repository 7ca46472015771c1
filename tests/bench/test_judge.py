"""The benchmark judge reads facts, not wording: right answers in the phrasings real models
use pass, wrong ones (negated, hedged, other values) fail."""

from __future__ import annotations

from datetime import date

import pytest

from bench.judge import amounts_in, answer_correct, dates_in, says_date, says_status


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        ("shipped", 'Order #W1234567 has status "shipped".'),
        ("shipped", "Good news! Your order was dispatched yesterday with UPS."),
        ("shipped", "Your package is on its way; it should arrive by November 5."),
        ("shipped", "It's in transit with FedEx, tracking 1Z999, and should be delivered Friday."),
        ("shipped", "Yes — it has shipped, but it hasn't been delivered yet."),
        ("shipped", "It is out for delivery today."),
        ("shipped", "It was processed on Monday and shipped on Tuesday."),
        ("delivered", "Your order arrived on 3 Nov 2026."),
        ("delivered", "It was delivered on November 3, 2026 at 14:02."),
        ("delivered", "It shipped on the 1st and was delivered on the 3rd."),
        ("cancelled", "This order was canceled at your request."),
        ("cancelled", "Order W1234567 has been cancelled and was never shipped."),
        ("cancelled", "It hasn't shipped: the order was cancelled."),
        ("cancelled", "Your order has been cancelled and you have been refunded."),
        ("pending", "Your order is still being prepared and has not shipped yet."),
        ("pending", "The order is pending."),
        ("processing", "It's currently processing in our warehouse."),
        ("processing", "Your order is being prepared for shipment."),
        ("processing", "No worries: your order is pending and will ship soon."),
        ("returned", "The order was returned and refunded. It had been delivered on May 2."),
        ("returned", "You sent it back on 2026-11-01, so its status is returned."),
    ],
)
def test_a_true_status_in_any_wording_is_correct(status: str, answer: str) -> None:
    assert says_status(answer, status) is True
    assert answer_correct({"status": status}, "finished", answer) is True


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        ("shipped", "Your order has not shipped yet."),
        ("shipped", "It hasn't been dispatched."),
        ("shipped", "It is not on its way yet; it is still being prepared."),
        ("shipped", "Your order was delivered yesterday."),
        ("shipped", "It has shipped and was delivered on Monday."),
        ("shipped", "Has it shipped? Not yet: it is still pending."),
        ("shipped", "It is pending, shipped or delivered."),
        ("shipped", "It is either shipped or cancelled."),
        ("shipped", "The order was cancelled."),
        ("shipped", "It will be shipped tomorrow."),
        ("shipped", "I could not find it."),
        ("delivered", "It shipped on Monday and has not arrived yet."),
        ("delivered", "It's on its way and should be delivered tomorrow."),
        ("delivered", "It was never delivered."),
        ("cancelled", "It was not cancelled; it shipped on Monday."),
        ("cancelled", "It shipped, then it was cancelled."),
        ("pending", "Your order shipped on Monday."),
        ("pending", "It is not pending any more."),
        ("processing", "The order was delivered."),
        ("returned", "It was delivered on May 2 and can be returned until June 1."),
    ],
)
def test_a_wrong_negated_announced_or_hedged_status_fails(status: str, answer: str) -> None:
    assert says_status(answer, status) is False


def test_an_unknown_status_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown order status 'lost'"):
        says_status("It is lost.", "lost")


@pytest.mark.parametrize(
    ("eligible", "answer", "ok"),
    [
        (True, "Yes, this order is returnable until 3 December.", True),
        (True, "It's within the return window, so you can send it back.", True),
        (True, "Order #W1 is not eligible for a return.", False),
        (False, "The return window has closed for this order.", True),
        (False, "That item is non-returnable.", True),
        (False, "Sorry, it's outside the return period.", True),
        (False, "Yes, you can return it.", False),
    ],
)
def test_eligibility_synonyms(eligible: bool, answer: str, ok: bool) -> None:
    assert answer_correct({"eligible": eligible}, "finished", answer) is ok


PRICES = {"AB-1234-BLK": [12.5], "AB-1234-WHT": [14.0, 12.6]}


@pytest.mark.parametrize(
    ("answer", "ok"),
    [
        ("The black one costs $12.5.", True),
        ("It is 12.50 USD.", True),
        ("It costs USD 12.50 (AB-1234-BLK).", True),
        ("The price is 12,50 €.", True),
        ("AB-1234-BLK is $12.50 and AB-1234-WHT is $14.00, or $12.60 with the promotion.", True),
        ("Lamp (AB-1234-WHT) costs 14.0; with SAVE10 the final price is 12.6.", True),
        ("It's about $13.", True),  # 12.60 rounded to a whole dollar
        # wrong amounts
        ("It costs $15.99.", False),
        ("It costs 12.75 USD.", False),
        # a right amount on the wrong SKU
        ("AB-1234-BLK costs $14.00.", False),
        # numbers inside ids, dates and percentages are no price
        ("Order W0000012 (AB-1234-BLK) has 12% off until 2026-12-14.", False),
        ("I could not find its price.", False),
    ],
)
def test_amounts_per_sku_with_a_tolerance(answer: str, ok: bool) -> None:
    expected = {"amounts": [12.5, 12.6, 14.0], "amounts_by_sku": PRICES}
    assert answer_correct(expected, "finished", answer) is ok


def test_amounts_are_read_with_their_currency_and_without_ids() -> None:
    found = amounts_in("SKU AB-1234-BLK costs $1,199.50 (10% off) on 3 Nov 2026, order #W1234567")
    assert [(a.value, a.currency, a.whole) for a in found] == [(1199.5, True, False)]
    assert [a.value for a in amounts_in("EUR 12 or 13 dollars")] == [12.0, 13.0]


STOCK = {"WS-8359-BK8": False, "WS-8359-BK9": True, "WS-8359-TN8": True}
VARIANTS = {
    "WS-8359-BK8": ["Black", "8"],
    "WS-8359-BK9": ["Black", "9"],
    "WS-8359-TN8": ["Tan", "8"],
}


@pytest.mark.parametrize(
    ("answer", "ok"),
    [
        ("WS-8359-BK9 is in stock: 40 available.", True),
        ("Yes, it's in stock.", True),
        ("It's available in tan; in black, size 8 is sold out but size 9 is available.", True),
        ("WS-8359-BK8 is out of stock, but WS-8359-BK9 and WS-8359-TN8 are in stock.", True),
        ("Black size 8 is sold out, tan is available.", True),
        ("Black in sizes 8 and 9: only size 9 is in stock. Tan's available.", True),
        ("The black one's in stock.", True),  # some black SKU is
        # wrong about one SKU
        ("WS-8359-BK8 is in stock.", False),
        ("WS-8359-TN8 is out of stock.", False),
        # true about one SKU, but the verdict (nothing available) is wrong for the product
        ("WS-8359-BK8 is currently out of stock. Expected restock date: 2026-11-10.", False),
        ("Sorry, it's out of stock.", False),
        ("Black is out of stock.", False),  # black size 9 is not
        ("I checked the product page.", False),
    ],
)
def test_stock_checks_every_sku_the_answer_names_and_the_verdict(answer: str, ok: bool) -> None:
    expected = {"stock_by_sku": STOCK, "variants": VARIANTS}
    assert answer_correct(expected, "finished", answer) is ok


def test_letter_sizes_are_named_in_capitals_only() -> None:
    expected = {
        "stock_by_sku": {"H-1000-BKS": False, "H-1000-BKM": True},
        "variants": {"H-1000-BKS": ["Black", "S"], "H-1000-BKM": ["Black", "M"]},
    }
    assert answer_correct(expected, "finished", "Black's available in M; S is sold out.")
    assert not answer_correct(expected, "finished", "Black is available in S.")
    # "it's" names no size: the claim is about every black SKU, and one is in stock.
    assert answer_correct(expected, "finished", "In black it's available.")


def test_stock_of_a_product_with_nothing_in_stock() -> None:
    expected = {"stock_by_sku": {"A-1000-X": False, "A-1000-Y": False}}
    assert answer_correct(expected, "finished", "It's out of stock in every colour.")
    assert answer_correct(expected, "finished", "A-1000-X is sold out; A-1000-Y too.")
    assert not answer_correct(expected, "finished", "A-1000-Y is in stock.")


@pytest.mark.parametrize(
    "written",
    [
        "2026-11-03",
        "2026-11-03T09:30:00Z",
        "3 Nov 2026",
        "3rd of November, 2026",
        "November 3, 2026",
        "Tuesday, Nov. 3rd 2026",
        "11/03/2026",
        "03/11/2026",
        "03.11.2026",
        "2026/11/03",
        "November 3",
    ],
)
def test_dates_in_any_common_format(written: str) -> None:
    answer = f"Your return deadline is {written}."
    assert says_date(answer, "2026-11-03")
    assert says_date(answer, date(2026, 11, 3))
    assert answer_correct({"date": "2026-11-03"}, "finished", answer)


@pytest.mark.parametrize(
    "written", ["2026-11-04", "4 Nov 2026", "November 3, 2025", "12/03/2026", "Nov 30", "soon"]
)
def test_a_wrong_date_fails(written: str) -> None:
    assert not says_date(f"Your return deadline is {written}.", "2026-11-03")


def test_dates_are_not_found_in_ordinary_words_and_bad_input_is_refused() -> None:
    assert dates_in("Extra fees 12 may apply; 3-5 business days.") == []
    with pytest.raises(ValueError, match="expected an ISO date"):
        says_date("today", "tomorrow")


def test_a_date_fact_adds_to_the_other_facts() -> None:
    expected = {"eligible": True, "date": "2026-12-01"}
    assert answer_correct(expected, "finished", "Yes, it is returnable until December 1, 2026.")
    assert not answer_correct(expected, "finished", "Yes, it is returnable until December 2.")
    assert not answer_correct(expected, "finished", "No, it is not eligible; deadline 2026-12-01.")
    assert not answer_correct(expected, "fallback", "Yes, it is returnable until 2026-12-01.")
