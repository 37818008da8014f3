"""What a researcher sees in the browser: the landing page, the three booking steps, the order
page (which composes what reservations, payments and provisioning show of an order) and its
forms. Above the domain apps; nothing imports it."""
