"""Help-centre articles of the sandbox shop, created by every generator run.

The texts are fixed (not seeded) so that policy answers — the 30-day return window, refund
timing, shipping times — are the same for every seed.
"""

from typing import TypedDict


class ArticleText(TypedDict):
    slug: str
    title: str
    category: str
    body: str


ARTICLES: tuple[ArticleText, ...] = (
    {
        "slug": "shipping-times",
        "title": "How long does shipping take?",
        "category": "faq",
        "body": (
            "Standard shipping within the contiguous United States takes 3-5 business days "
            "after your order ships. Expedited shipping takes 2 business days and overnight "
            "shipping arrives the next business day when the order is placed before 1 pm "
            "Eastern. Orders are usually processed and handed to the carrier within 1 "
            "business day. Alaska, Hawaii and US territories add 2-4 business days. You can "
            "see the estimated delivery date on the order page once the order has shipped."
        ),
    },
    {
        "slug": "shipping-costs",
        "title": "Shipping costs and free shipping",
        "category": "policy",
        "body": (
            "Standard shipping is free on orders of $50 or more before tax. Orders under $50 "
            "pay a flat $5.99 standard shipping fee. Expedited shipping costs $14.99 and "
            "overnight shipping costs $29.99 regardless of the order total. Gold tier members "
            "get free expedited shipping on every order and silver members get free standard "
            "shipping with no minimum."
        ),
    },
    {
        "slug": "track-order",
        "title": "How do I track my order?",
        "category": "faq",
        "body": (
            "When your order ships we email a tracking number and carrier name (UPS, FedEx, "
            "USPS or DHL). The order status changes from processing to shipped and the "
            "shipping section of the order shows the tracking number and estimated delivery "
            "date. Tracking information can take up to 24 hours to appear on the carrier's "
            "website after the label is created."
        ),
    },
    {
        "slug": "order-status-meanings",
        "title": "What does my order status mean?",
        "category": "faq",
        "body": (
            "Pending: we received your order and are verifying payment. Processing: payment "
            "is confirmed and the warehouse is picking and packing your items. Shipped: the "
            "parcel is with the carrier and has a tracking number. Delivered: the carrier "
            "confirmed delivery. Cancelled: the order was cancelled before shipping and any "
            "charge was reversed. Returned: the items came back to us and the refund was "
            "issued."
        ),
    },
    {
        "slug": "late-or-missing-package",
        "title": "My package is late or missing",
        "category": "faq",
        "body": (
            "If your order is more than 3 business days past its estimated delivery date, or "
            "the tracking shows delivered but you cannot find the parcel, check with "
            "neighbours and your building's mail room first. If it still has not turned up "
            "after 2 days, contact support with your order number. We open a trace with the "
            "carrier and, if the parcel is confirmed lost, ship a free replacement or issue a "
            "full refund."
        ),
    },
    {
        "slug": "return-policy",
        "title": "Return policy",
        "category": "policy",
        "body": (
            "You can return most items within 30 days of delivery for a full refund. Items "
            "must be unused, in their original packaging and with all accessories. The "
            "30-day return window starts on the delivery date shown on the order. Final-sale "
            "items, gift cards, opened personal care products and custom orders cannot be "
            "returned. Orders that were cancelled before shipping need no return. A return "
            "must be requested before it is shipped back; unannounced parcels may be refused."
        ),
    },
    {
        "slug": "how-to-return",
        "title": "How do I start a return?",
        "category": "faq",
        "body": (
            "Open a return request with your order number and the reason for the return. You "
            "can return the whole order or only some items by listing their SKUs. Once the "
            "request is approved we email a prepaid return label. Pack the items securely, "
            "attach the label and drop the parcel at any carrier location within 14 days of "
            "approval. The return status moves from requested to approved, received and "
            "finally refunded."
        ),
    },
    {
        "slug": "refund-timing",
        "title": "When will I get my refund?",
        "category": "faq",
        "body": (
            "Refunds are issued within 5 business days after the returned items arrive at our "
            "warehouse and pass inspection. The refund goes back to the original payment "
            "method; banks usually take another 3-10 business days to show it on your "
            "statement. Original shipping fees are refunded only when the return is due to our "
            "error, such as a damaged, defective or wrong item."
        ),
    },
    {
        "slug": "refund-policy",
        "title": "Refund policy",
        "category": "policy",
        "body": (
            "Approved returns are refunded to the original payment method for the price paid, "
            "including any promotion discount applied at checkout. Return shipping is free for "
            "damaged, defective or incorrect items; for other returns a $6.95 return label fee "
            "is deducted from the refund. Gold tier members never pay the return label fee. "
            "Orders paid with a gift card are refunded to a new gift card."
        ),
    },
    {
        "slug": "exchanges",
        "title": "Can I exchange an item for a different size or colour?",
        "category": "faq",
        "body": (
            "We do not process direct exchanges. To get a different size or colour, start a "
            "return for the item you have and place a new order for the variant you want. "
            "This is the fastest way to get the new item, because the new order ships right "
            "away instead of waiting for the return to arrive."
        ),
    },
    {
        "slug": "damaged-items",
        "title": "My item arrived damaged",
        "category": "faq",
        "body": (
            "We are sorry! Please contact support within 7 days of delivery with your order "
            "number and a photo of the damage and of the packaging. We will send a free "
            "replacement if the SKU is in stock, or a full refund including shipping if it is "
            "not. You do not need to pay for return shipping of damaged items, and for items "
            "under $25 we usually do not ask you to send them back at all."
        ),
    },
    {
        "slug": "wrong-item",
        "title": "I received the wrong item",
        "category": "faq",
        "body": (
            "If the SKU you received does not match the SKU on your order, contact support "
            "with the order number and a photo of the item label. We ship the correct item at "
            "no charge as soon as it is in stock and send a prepaid label for the wrong one."
        ),
    },
    {
        "slug": "warranty",
        "title": "Warranty coverage",
        "category": "policy",
        "body": (
            "All electronics and audio products come with a 1-year limited manufacturer "
            "warranty from the delivery date covering defects in materials and workmanship. "
            "Apparel and home goods are covered for 90 days. The warranty does not cover "
            "accidental damage, water damage, normal wear or unauthorised repairs. To make a "
            "warranty claim contact support with the order number and a description of the "
            "defect; we repair, replace or refund at our discretion."
        ),
    },
    {
        "slug": "price-match",
        "title": "Price match guarantee",
        "category": "policy",
        "body": (
            "If you find the identical SKU (same brand, model, colour and size) for a lower "
            "price at a major US retailer within 14 days of your purchase, we refund the "
            "difference. Marketplace sellers, clearance, refurbished items, bundles and "
            "limited-time flash sales are excluded. Our own promotion codes already applied "
            "to an order cannot be combined with a price match."
        ),
    },
    {
        "slug": "promotions-and-discount-codes",
        "title": "Promotions and discount codes",
        "category": "policy",
        "body": (
            "Promotions take a percentage off one SKU or every variant of a product while "
            "they are active. Only one promotion applies per item: the checkout automatically "
            "uses the best active discount. Promotion codes cannot be applied to orders after "
            "they are placed, and expired promotions cannot be honoured."
        ),
    },
    {
        "slug": "payment-methods",
        "title": "Which payment methods do you accept?",
        "category": "faq",
        "body": (
            "We accept Visa, Mastercard, American Express and Discover credit and debit cards, "
            "PayPal, Apple Pay, Google Pay and our own gift cards. All charges are in US "
            "dollars. Your card is authorised when you place the order and charged when the "
            "order ships. We do not accept cash on delivery, cheques or cryptocurrency."
        ),
    },
    {
        "slug": "cancel-order",
        "title": "How do I cancel an order?",
        "category": "faq",
        "body": (
            "Orders can be cancelled free of charge while they are pending or processing. Once "
            "an order has shipped it can no longer be cancelled; instead, refuse the delivery "
            "or start a return after it arrives. Cancelled orders are never charged; any "
            "authorisation hold on your card is released within 3-5 business days."
        ),
    },
    {
        "slug": "change-order",
        "title": "Can I change my order or shipping address?",
        "category": "faq",
        "body": (
            "You can change the shipping address, shipping speed or items of an order while "
            "it is pending. Once the order is processing, the warehouse has started packing "
            "it and only the shipping address can be changed. After shipping, address changes "
            "must be requested from the carrier using the tracking number."
        ),
    },
    {
        "slug": "international-shipping",
        "title": "International shipping",
        "category": "policy",
        "body": (
            "We ship to Canada, the United Kingdom, the European Union, Australia and Japan "
            "with DHL Express. International delivery takes 5-10 business days. Import duties "
            "and taxes are calculated at checkout and included in the price, so nothing is "
            "due on delivery. International returns are accepted within 30 days of delivery, "
            "but the return shipping fee is not refunded unless the item is defective."
        ),
    },
    {
        "slug": "gift-cards",
        "title": "Gift cards",
        "category": "faq",
        "body": (
            "Digital gift cards are available from $10 to $500 and are delivered by email. "
            "They never expire and carry no fees. Gift cards cannot be returned, refunded or "
            "exchanged for cash, except where required by law. Lost gift card codes can be "
            "reissued if you contact support with the purchase order number."
        ),
    },
    {
        "slug": "membership-tiers",
        "title": "Membership tiers: standard, silver and gold",
        "category": "policy",
        "body": (
            "Every account starts at the standard tier. Customers who spend $500 in a calendar "
            "year become silver members and those who spend $1,500 become gold members for "
            "the following year. Silver members get free standard shipping with no minimum. "
            "Gold members get free expedited shipping, free return labels and priority "
            "support."
        ),
    },
    {
        "slug": "out-of-stock",
        "title": "An item is out of stock. When will it be back?",
        "category": "faq",
        "body": (
            "Availability is shown per SKU, because each colour and size is stocked "
            "separately across our East, West and Central warehouses. When a SKU is out of "
            "stock, the expected restock date is shown if the supplier has confirmed one. We "
            "do not take backorders; please check again after the restock date."
        ),
    },
    {
        "slug": "account-and-privacy",
        "title": "Account security and privacy",
        "category": "policy",
        "body": (
            "We never ask for your password or full card number by email, chat or phone. "
            "Support agents verify your identity with your user ID and the email address on "
            "the account before discussing orders. We keep order history for 7 years for tax "
            "purposes; you can request deletion of your other personal data at any time."
        ),
    },
    {
        "slug": "sales-tax",
        "title": "Sales tax",
        "category": "policy",
        "body": (
            "Sales tax is charged on orders shipped to states where we are required to collect "
            "it, based on the shipping address. The tax is shown at checkout before you place "
            "the order. Refunds include the tax paid on the returned items."
        ),
    },
    {
        "slug": "contact-support",
        "title": "How to contact customer support",
        "category": "faq",
        "body": (
            "Our support team is available by chat and email every day from 8 am to 10 pm "
            "Eastern. Please have your order number (it starts with #W) and your user ID ready. "
            "Most requests are answered within 4 hours; gold members are answered first."
        ),
    },
)
