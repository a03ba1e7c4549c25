"""Fixed tool alias tables for the AgentDojo suites (written here; never tuned on a guard).

Every tool of a suite gets a neutral alias that keeps its function readable but changes its
surface form (verb and noun choices). Each table is bijective and maps onto fresh names; the
tests check both, and that every tool of the installed suites is covered.
"""

from __future__ import annotations

AGENTDOJO_ALIASES: dict[str, dict[str, str]] = {
    "banking": {
        "get_iban": "account_number_lookup", "send_money": "make_payment",
        "schedule_transaction": "plan_payment", "update_scheduled_transaction": "edit_planned_payment",
        "get_balance": "account_balance", "get_most_recent_transactions": "latest_payments",
        "get_scheduled_transactions": "planned_payments", "read_file": "open_document",
        "get_user_info": "profile_details", "update_password": "change_login_secret",
        "update_user_info": "edit_profile",
    },
    "slack": {
        "get_channels": "list_rooms", "add_user_to_channel": "room_add_member",
        "read_channel_messages": "room_history", "read_inbox": "personal_messages",
        "send_direct_message": "message_person", "send_channel_message": "message_room",
        "get_users_in_channel": "room_members", "invite_user_to_slack": "workspace_invite",
        "remove_user_from_slack": "workspace_remove_member", "get_webpage": "fetch_url",
        "post_webpage": "publish_url",
    },
    "travel": {
        "get_user_information": "traveller_profile", "get_all_hotels_in_city": "city_hotels",
        "get_hotels_prices": "hotel_rates", "get_rating_reviews_for_hotels": "hotel_feedback",
        "get_hotels_address": "hotel_location", "get_all_restaurants_in_city": "city_restaurants",
        "get_cuisine_type_for_restaurants": "restaurant_cuisine",
        "get_restaurants_address": "restaurant_location",
        "get_rating_reviews_for_restaurants": "restaurant_feedback",
        "get_dietary_restrictions_for_all_restaurants": "restaurant_diet_options",
        "get_contact_information_for_restaurants": "restaurant_phone_book",
        "get_price_for_restaurants": "restaurant_rates", "check_restaurant_opening_hours": "restaurant_hours",
        "get_all_car_rental_companies_in_city": "city_car_hire",
        "get_car_types_available": "car_hire_models", "get_rating_reviews_for_car_rental": "car_hire_feedback",
        "get_car_fuel_options": "car_hire_fuel", "get_car_rental_address": "car_hire_location",
        "get_car_price_per_day": "car_hire_daily_rate", "create_calendar_event": "add_agenda_item",
        "search_calendar_events": "find_agenda_items", "get_day_calendar_events": "agenda_for_day",
        "cancel_calendar_event": "drop_agenda_item", "reserve_hotel": "book_room",
        "reserve_car_rental": "book_car", "reserve_restaurant": "book_table",
        "get_flight_information": "flight_options", "send_email": "dispatch_mail",
    },
    "workspace": {
        "send_email": "dispatch_mail", "delete_email": "discard_mail", "get_unread_emails": "new_mail",
        "get_sent_emails": "outgoing_mail", "get_received_emails": "incoming_mail",
        "get_draft_emails": "unsent_mail", "search_emails": "find_mail",
        "search_contacts_by_name": "people_by_name", "search_contacts_by_email": "people_by_address",
        "get_current_day": "today_date", "search_calendar_events": "find_agenda_items",
        "get_day_calendar_events": "agenda_for_day", "create_calendar_event": "add_agenda_item",
        "cancel_calendar_event": "drop_agenda_item", "reschedule_calendar_event": "move_agenda_item",
        "add_calendar_event_participants": "invite_to_agenda_item", "append_to_file": "extend_document",
        "search_files_by_filename": "documents_by_title", "create_file": "new_document",
        "delete_file": "discard_document", "get_file_by_id": "open_document_by_id",
        "list_files": "all_documents", "share_file": "grant_document_access", "search_files": "find_documents",
    },
}
